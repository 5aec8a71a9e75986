"""Index samplers for data-parallel training and exact evaluation.

Training: every rank gets the same number of samples per epoch (else DDP hangs at epoch end), in
an order that is a pure function of (seed, epoch), and a resumed run can start mid-epoch.
Evaluation: `DistributedSampler` pads by repeating samples, which counts them twice; here each
sample goes to exactly one rank and the metric counts are summed over ranks (DESIGN §6).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import BatchSampler, Sampler


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


class ResizableBatchSampler(BatchSampler):
    """A `BatchSampler` whose batch size can change between epochs (`resize`).

    A DataLoader reads its batch sampler anew at each `iter(loader)`, in the main process, so a
    new size takes effect at the next epoch without restarting persistent workers (they receive
    index lists, whatever their length). Resize only between epochs, before `iter(loader)`.
    """

    def __init__(self, sampler: Sampler[int], batch_size: int) -> None:
        super().__init__(sampler, batch_size, drop_last=True)

    def resize(self, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size


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
