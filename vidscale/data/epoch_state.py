"""Integers a dataset shares with its loader workers (epoch, resume position).

Loader workers hold copies of the dataset made when they start. With persistent workers they
start once per run, so a plain attribute set by `set_epoch` in the main process would never reach
them; these values live in shared memory instead, so the workers read the current ones (also
when the dataset is sent to spawned or forkserver workers: torch pickles shared tensors as
handles to the same memory).
"""

from __future__ import annotations

import torch


class SharedInts:
    """A fixed number of int64 values in shared memory, read and written by position."""

    def __init__(self, size: int) -> None:
        self._values = torch.zeros(size, dtype=torch.int64).share_memory_()

    def __getitem__(self, position: int) -> int:
        return int(self._values[position])

    def __setitem__(self, position: int, value: int) -> None:
        self._values[position] = value
