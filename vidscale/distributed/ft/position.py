"""The data position every replica group shares: exact while groups leave and rejoin.

TorchFT leaves the data to the user, and its sampler drops batches when a group rejoins
(torchft #58). Here the position is part of the state a rejoining group receives: one
permutation of the training set per epoch (from the seed and the epoch), and `consumed`, how
many of its samples committed steps have taken. A step's global batch is the next
`participants x per_group` samples (fewer at the epoch's end); participant p of the quorum takes
its p-th share, and within the group, process r the r-th part of that. The position moves
only when the step commits, by the whole global batch, on every group alike: a step that does
not commit (a peer died in it) is taken again with the quorum that follows, so no sample is
lost and none seen twice in an epoch, and a group that rejoins continues from the same count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class DataPosition:
    """Where the run is in its data: `epoch` (from 0) and `consumed` samples of it."""

    size: int
    seed: int
    epoch: int = 0
    consumed: int = 0

    def order(self) -> list[int]:
        """This epoch's permutation of the training set (the same on every group)."""
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return torch.randperm(self.size, generator=generator).tolist()

    def step_range(self, global_batch: int) -> tuple[int, int]:
        """[start, stop) of this epoch's permutation that the next step takes."""
        return self.consumed, min(self.consumed + global_batch, self.size)

    def share(
        self,
        global_batch: int,
        *,
        participant: int,
        per_participant: int,
        process: int,
        per_process: int,
    ) -> list[int]:
        """Dataset indices of this process's part of the next step (maybe empty at the end)."""
        start, stop = self.step_range(global_batch)
        first = start + participant * per_participant + process * per_process
        return self.order()[first : max(first, min(first + per_process, stop))]

    def advance(self, global_batch: int) -> None:
        """After a committed step: past its samples; into the next epoch at the end."""
        _, stop = self.step_range(global_batch)
        self.consumed = stop
        if self.consumed >= self.size:
            self.epoch, self.consumed = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {
            "size": self.size,
            "seed": self.seed,
            "epoch": self.epoch,
            "consumed": self.consumed,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["size"] != self.size or state["seed"] != self.seed:
            raise ValueError(
                f"a peer's data position is for {state['size']} samples seed {state['seed']}, "
                f"this group has {self.size} samples seed {self.seed}"
            )
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])
