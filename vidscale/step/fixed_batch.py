"""The training step on one fixed batch of random clips: what the fast-path probe and the benches
time. It is `run.train_step` itself, with one micro-batch a step and no loader (data loading is
measured on its own, `bench data-wait`), so a bench or the probe measures the step the trainer
runs: forward and loss inside the fast path's autocast, backward, the gradient norm, the
agreement (local on one process) and the optimizer's update.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from vidscale.step.objective import CROSS_ENTROPY, Objective
from vidscale.step.run import (
    MicroBatchSync,
    PrepareInput,
    StepContext,
    StepResult,
    no_sync_needed,
    train_step,
)

CLIPS = "clips"  # the batch's one input: float clips already on the device

# The benches' and the probe's optimizer when the caller gives none: SGD with momentum and
# weight decay, the video recipes' optimizer (the rate is the step's `lr`).
SGD_MOMENTUM, SGD_WEIGHT_DECAY = 0.9, 1e-4
BENCH_LR = 1e-4  # small, so that timed steps keep the weights near where they started


def already_prepared(inputs: Mapping[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """The clips as made: random float clips on the device need no moving or normalising."""
    return inputs[CLIPS]


def bench_sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        model.parameters(), lr=BENCH_LR, momentum=SGD_MOMENTUM, weight_decay=SGD_WEIGHT_DECAY
    )


class FixedBatchStep:
    """`model` (as it runs forward: compiled or wrapped, if so) trained on `clips` (N, C, T, H, W)
    float on the device and `labels` (N,); calling it runs one step and returns its result.
    `optimizer` defaults to `bench_sgd` over `model`'s parameters; `autocast` is the fast
    path's (`FastPath.autocast()`). A model wrapped by a data-parallel strategy takes the
    strategy's `micro_batch` context, and its `world_size` ranks agree on every step; `objective`
    is the loss (binary cross-entropy for multi-label batches, `objective.objective_for`)."""

    def __init__(
        self,
        model: nn.Module,
        clips: torch.Tensor,
        labels: torch.Tensor,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
        lr: float = BENCH_LR,
        micro_batch: MicroBatchSync = no_sync_needed,
        world_size: int = 1,
        objective: Objective = CROSS_ENTROPY,
    ) -> None:
        self.context = StepContext(
            model=model,
            optimizer=optimizer if optimizer is not None else bench_sgd(model),
            prepare=already_prepared,
            device=clips.device,
            autocast=autocast,
            micro_batch=micro_batch,
            world_size=world_size,
            objective=objective,
        )
        self.clips, self.labels, self.lr = clips, labels, lr

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.context.optimizer

    def on(self, clips: torch.Tensor, labels: torch.Tensor, *, accumulate: int = 1) -> StepResult:
        """One step on other clips of the same kind (a bench that feeds decoded batches, or
        times other shapes): `accumulate` micro-batches of `clips`, one update, as training's
        accumulated step runs them."""
        batch = {"inputs": {CLIPS: clips}, "label": labels, "skipped": []}
        return train_step(
            self.context,
            itertools.repeat(batch),
            accumulate=accumulate,
            clips=len(labels) * accumulate,
            lr=self.lr,
        )

    def loaded(
        self, batches: Iterator[dict[str, Any]], *, prepare: PrepareInput, clips: int
    ) -> StepResult:
        """One step on the next batch of a loader (`clips` clips, as the dataset yields them:
        `prepare` moves and normalises its inputs, `StepResult.wait_s` is the time blocked on
        it), as training runs it."""
        context = dataclasses.replace(self.context, prepare=prepare)
        return train_step(context, batches, accumulate=1, clips=clips, lr=self.lr)

    def __call__(self) -> StepResult:
        return self.on(self.clips, self.labels)
