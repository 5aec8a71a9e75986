"""One optimizer step, as training and the benches run it: one context in, a complete result out.

Synchronous data-parallel SGD (TSM paper §4): `accumulate` micro-batches run forward and
backward inside the fast path's autocast, the strategy's `micro_batch(last=...)` context around
each (DDP all-reduces gradients on the last only, simulating a K-times larger cluster), then
one update. The update is applied only if every rank's loss and gradient norm are finite: one
small all-reduce agrees on that, and carries the step's metrics and any rank's stop request.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from vidscale.config import RunConfig
from vidscale.distributed.env import DistEnv
from vidscale.step.agreement import StepAgreement, agree_step, first_nonfinite, gradient_norm
from vidscale.step.objective import CROSS_ENTROPY, Objective


class PrepareInput(Protocol):
    """A batch's inputs -> the model's input on `device` (`data.inputs.ModelInput` in training:
    the clips moved and normalised; `fixed_batch.already_prepared` for clips made on the device)."""

    def __call__(
        self, inputs: Mapping[str, torch.Tensor], device: torch.device
    ) -> torch.Tensor: ...


class MicroBatchSync(Protocol):
    """The data-parallel strategy's context around one micro-batch (`DataParallel.micro_batch`):
    gradients are synchronised on the `last` of a step's micro-batches only."""

    def __call__(self, *, last: bool) -> AbstractContextManager[Any]: ...


def no_sync_needed(*, last: bool) -> AbstractContextManager[Any]:
    """One process, or a model that synchronises nothing: every micro-batch runs plainly."""
    return nullcontext()


def never() -> bool:
    return False


@dataclass(frozen=True)
class StepContext:
    """What every step of a run uses, built once.

    `model` is the model as the strategy wrapped it (the one that runs forward); `prepare`
    turns a batch's inputs into the model's input on `device`; `autocast` is the fast path's
    (a fresh context manager per call); `stop_requested` is read once per step, late, so that a
    stop signal during a step stops after it; `world_size` ranks take part in the agreement;
    `objective` is the run's loss and top-1 (cross-entropy, or binary for multi-label data).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    prepare: PrepareInput
    device: torch.device
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext
    micro_batch: MicroBatchSync = no_sync_needed
    world_size: int = 1
    clip_grad_norm: float = 0.0  # 0: no clipping
    stop_requested: Callable[[], bool] = never
    objective: Objective = CROSS_ENTROPY  # `objective.objective_for(multi_label=...)`


@dataclass(frozen=True)
class MicroBatchResult:
    loss: float  # this micro-batch's mean loss weighted by its share of the step's clips
    hits: int  # top-1 correct
    count: int  # clips


@dataclass(frozen=True)
class StepResult:
    """One step, complete: this rank's view and the agreement over all ranks."""

    loss: float  # this rank's loss: the sum of its micro-batches' weighted losses
    hits: int  # this rank's top-1 correct
    count: int  # this rank's clips
    wait_s: float  # blocked on the next batch: data loading not hidden by compute
    grad_norm: float  # this rank's, before clipping
    agreed: StepAgreement  # over all ranks: the update was applied iff `agreed.finite`
    lr: float
    seconds: float  # the step's wall time on this rank
    clips: int  # over all ranks
    skipped: list[tuple[str, str]]  # (path, reason) of the videos the loader could not read
    # What was first not finite on this rank ("the loss", "the gradient of NAME"); "" when this
    # rank's step was finite (another rank's may not have been: `agreed.finite`).
    nonfinite: str = ""

    @property
    def applied(self) -> bool:
        """Whether the optimizer's update was applied (the step was finite on every rank)."""
        return self.agreed.finite


def seed_step(cfg: RunConfig, env: DistEnv, step: int) -> None:
    """Dropout and any other in-model randomness: a pure function of (seed, rank, step)."""
    torch.manual_seed((cfg.train.seed * 1_000_003 + env.rank * 7_919 + step) % (2**63))


def forward_backward(
    ctx: StepContext, batch: dict[str, Any], *, clips: int, last: bool = True
) -> MicroBatchResult:
    """Forward and backward of one micro-batch as training runs them: inside the strategy's
    micro-batch context and the autocast, the run's objective (`ctx.objective`) in float32, the
    mean loss weighted by the micro-batch's share of the step's `clips` on this rank (so that
    accumulated gradients equal those of one batch of `clips`). Gradients add to `.grad`."""
    inputs = ctx.prepare(batch["inputs"], ctx.device)
    targets = ctx.objective.targets(batch, ctx.device)
    count = len(targets)
    with ctx.micro_batch(last=last), ctx.autocast():
        logits = ctx.model(inputs)
        mean = ctx.objective.loss(logits, targets)
        loss = mean * count / clips
        loss.backward()
    hits = ctx.objective.hits(logits.detach(), targets)
    return MicroBatchResult(loss=loss.item(), hits=hits, count=count)


def train_step(
    ctx: StepContext, batches: Iterator[dict[str, Any]], *, accumulate: int, clips: int, lr: float
) -> StepResult:
    """One optimizer step at `lr` over the next `accumulate` micro-batches of `batches`, which
    together hold `clips` clips on this rank; the update is applied only if the step is finite
    on every rank. Gradients are zeroed afterwards either way."""
    start = time.perf_counter()
    for group in ctx.optimizer.param_groups:
        group["lr"] = lr
    loss, hits, count, wait_s = 0.0, 0, 0, 0.0
    skipped: list[tuple[str, str]] = []
    for micro in range(accumulate):
        t0 = time.perf_counter()
        batch = next(batches)
        wait_s += time.perf_counter() - t0
        part = forward_backward(ctx, batch, clips=clips, last=micro == accumulate - 1)
        loss += part.loss
        hits += part.hits
        count += part.count
        skipped.extend(batch["skipped"])
    grad_norm = gradient_norm(ctx.model, max_norm=ctx.clip_grad_norm)
    finite = math.isfinite(loss) and math.isfinite(grad_norm)
    agreed = agree_step(
        loss=loss,
        hits=hits,
        clips=count,
        finite=finite,
        stop=ctx.stop_requested(),  # read late: a signal during this step stops after it
        world_size=ctx.world_size,
        device=ctx.device,
    )
    if agreed.finite:
        ctx.optimizer.step()
    nonfinite = "" if finite else first_nonfinite(ctx.model, loss=loss)
    ctx.optimizer.zero_grad(set_to_none=True)
    return StepResult(
        loss=loss,
        hits=hits,
        count=count,
        wait_s=wait_s,
        grad_norm=grad_norm,
        agreed=agreed,
        lr=lr,
        seconds=time.perf_counter() - start,
        clips=clips * ctx.world_size,
        skipped=skipped,
        nonfinite=nonfinite,
    )
