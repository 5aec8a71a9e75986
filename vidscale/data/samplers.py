"""Index samplers for data-parallel training and exact evaluation.

Training: every rank gets the same number of samples per epoch (else DDP hangs at epoch end), in
an order that is a pure function of (seed, epoch), and a resumed run can start mid-epoch.
Evaluation: `DistributedSampler` pads by repeating samples, which counts them twice; here each
sample goes to exactly one rank and the metric counts are summed over ranks (DESIGN §6).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Sampler

from vidscale.data.clip import ClipSpec


class TrainSampler(Sampler[int]):
    """Shuffled, rank-sharded, equal-length indices; the tail that does not divide is dropped.

    `start` skips the first samples of this rank's share: resume inside an epoch.
    """

    def __init__(
        self, size: int, *, rank: int, world_size: int, seed: int, shuffle: bool = True
    ) -> None:
        if size < world_size:
            raise ValueError(f"{size} samples cannot be shared by {world_size} ranks")
        self.size = size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int, *, start: int = 0) -> None:
        self.epoch = epoch
        self.start = start

    def per_rank(self) -> int:
        return self.size // self.world_size

    def indices(self) -> list[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
            order = torch.randperm(self.size, generator=g).tolist()
        else:
            order = list(range(self.size))
        n = self.per_rank()
        return order[self.rank : n * self.world_size : self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices()[self.start :])

    def __len__(self) -> int:
        return self.per_rank() - self.start


@dataclass(frozen=True)
class BatchRequest:
    """One batch to make: `size` clips, sampled by `spec` (None: the dataset's own spec)."""

    size: int
    spec: ClipSpec | None = None


@dataclass(frozen=True)
class RequestCycle:
    """An epoch's batch requests in compact form: `total` requests from the epoch's start,
    request i being `cycle[(i // repeat) % len(cycle)]` (a multigrid phase: one entry per step
    of its short cycle, `repeat` micro-batches per step). A plain epoch is one entry."""

    cycle: tuple[BatchRequest, ...]
    total: int
    repeat: int = 1

    def __post_init__(self) -> None:
        if not self.cycle or self.total < 0 or self.repeat < 1:
            raise ValueError(f"a request cycle needs entries, total >= 0, repeat >= 1: {self}")
        for r in self.cycle:
            if r.size < 1:
                raise ValueError(f"a batch needs >= 1 clip, got {r.size}")

    def __getitem__(self, i: int) -> BatchRequest:
        return self.cycle[(i // self.repeat) % len(self.cycle)]

    def __len__(self) -> int:
        return self.total

    def clips(self) -> int:
        return sum(self[i].size for i in range(self.total))


class RequestBatchSampler(Sampler[list[Any]]):
    """Batches of the next indices, one per request, the requests set before each epoch.

    A DataLoader reads its batch sampler anew at each `iter(loader)`, in the main process, so
    batch sizes and clip shapes may change from epoch to epoch and from batch to batch (a
    multigrid schedule, an adapted batch size) while persistent workers keep running: they
    receive lists of keys, whatever their length. A key is an index, or (index, spec) when the
    request names a spec (the dataset samples that item with it). Batches stop early, never
    short, when the indices run out. Call `set_requests` only before `iter(loader)`.
    """

    def __init__(self, sampler: Sampler[int]) -> None:
        self.sampler = sampler
        self.requests: list[BatchRequest] = []

    def set_requests(self, requests: Sequence[BatchRequest]) -> None:
        for r in requests:
            if r.size < 1:
                raise ValueError(f"a batch needs >= 1 clip, got {r.size}")
        self.requests = list(requests)

    def __iter__(self) -> Iterator[list[Any]]:
        indices = iter(self.sampler)
        for request in self.requests:
            batch = list(itertools.islice(indices, request.size))
            if len(batch) < request.size:
                return
            spec = request.spec
            yield batch if spec is None else [(i, spec) for i in batch]

    def __len__(self) -> int:
        return len(self.requests)


class ExactEvalSampler(Sampler[int]):
    """Rank r gets indices r, r + W, r + 2W, ...: every sample exactly once, no padding."""

    def __init__(self, size: int, *, rank: int, world_size: int) -> None:
        self.size = size
        self.rank = rank
        self.world_size = world_size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.size, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.size, self.world_size))
