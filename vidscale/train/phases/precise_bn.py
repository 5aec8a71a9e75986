"""Precise BatchNorm: running statistics recomputed as a true average over many batches.

The exponential moving average that BN keeps in training lags behind the weights, and after a
multigrid run (Wu et al. 2020, §3.3) it mixes clip shapes. PySlowFast therefore recomputes the
statistics at the base shape before evaluation (`TRAIN`/`BN.USE_PRECISE_STATS`, through fvcore's
`update_bn_stats`): with the weights fixed, every BN's running mean becomes the population mean
of the per-batch means and its running variance the population mean of the per-batch (unbiased)
variances, over `num_batches` batches, independently of the momentum.

`torch.optim.swa_utils.update_bn` computes exactly that: it resets every BN, sets its momentum to
None (`nn.BatchNorm`'s cumulative moving average, running = running + (batch − running) / n,
which after n batches is the mean of the n batch statistics) and runs the model in train mode
without gradients. `precise_bn` uses it rather than a loop of its own and adds what fvcore's
contract has and `update_bn` lacks: exactly `num_batches` batches (an error, with the old
statistics put back, when there are fewer), a caller-supplied forward (autocast, input
preparation, a model that takes more than one tensor), each module's training flag and every
BN's momentum put back even when the forward raises, and the batch counters
(`num_batches_tracked`) left as training made them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.swa_utils import update_bn

from vidscale.distributed.aavg.averaging import merge_running_statistics


def _call(model: nn.Module, batch: Tensor) -> object:
    return model(batch)


class _Forward(nn.Module):
    """`update_bn` calls `module(input)`; this runs the caller's forward on the wrapped model
    (whose BNs `update_bn` finds through `modules()`)."""

    def __init__(self, model: nn.Module, fn: Callable[[nn.Module, Tensor], object]) -> None:
        super().__init__()
        self.model = model
        self.fn = fn

    def forward(self, batch: Tensor) -> object:
        return self.fn(self.model, batch)


def precise_bn(
    model: nn.Module,
    batches: Iterable[Tensor],
    *,
    num_batches: int,
    forward: Callable[[nn.Module, Tensor], object] = _call,
) -> None:
    """Recompute every BatchNorm's running statistics over the first `num_batches` batches.

    Afterwards, for every `_BatchNorm` (plain, sub-batch, SyncBatchNorm run per process) with
    running statistics: running_mean = mean over the batches of the batch means, running_var =
    mean of the unbiased batch variances (fvcore / PySlowFast semantics; momentum plays no
    part). `forward(model, batch)` runs one batch (default `model(batch)`) with the whole
    model in train mode (as fvcore: dropout is on, it does not touch BN inputs in these models)
    and no gradient; the weights are not changed. Afterwards each module's training flag, every
    BN's momentum and `num_batches_tracked` are what they were.

    Sub-batch BN (`vidscale.models.batchnorm`): each split gets the precise statistics of its
    clips and the plain buffers their aggregate (sub-batch BN keeps the aggregate current after
    every training forward, which is PySlowFast's separate `aggregate_sub_bn_stats` step), so
    every batch's clip count must be divisible by the splits.

    Raises ValueError when `num_batches` < 1, or when `batches` ends early (the statistics from
    before the call are then put back). Per process: ranks that should agree must be given the
    same batches, or have their statistics averaged afterwards.
    """
    if num_batches < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches}")
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    if not bns:
        return
    before = _SavedState(model, bns)
    seen = 0

    def wrapped() -> Iterator[tuple[Tensor]]:
        nonlocal seen
        for batch in itertools.islice(batches, num_batches):
            seen += 1
            # A 1-tuple: update_bn unpacks list/tuple batches to their first element, so this
            # hands over the batch itself, whatever its type.
            yield (batch,)

    ok = False
    try:
        update_bn(wrapped(), _Forward(model, forward))
        ok = seen == num_batches
    finally:
        before.put_back(statistics=not ok)
    if seen != num_batches:
        raise ValueError(f"precise BN needs {num_batches} batches, the iterable gave {seen}")


class _SavedState:
    """What `precise_bn` puts back: every module's training flag, every BN's momentum, and the
    BN buffers (all of them after a failure, else only the batch counters)."""

    def __init__(self, model: nn.Module, bns: list[_BatchNorm]) -> None:
        self.modes = [(m, m.training) for m in model.modules()]
        self.momenta = [(bn, bn.momentum) for bn in bns]
        # Every BN buffer (running and per-split statistics, counters), to put back on failure.
        self.buffers = [(b, b.detach().clone()) for bn in bns for b in bn.buffers()]
        self.counters = [
            (bn.num_batches_tracked, bn.num_batches_tracked.clone())
            for bn in bns
            if bn.num_batches_tracked is not None
        ]

    def put_back(self, *, statistics: bool) -> None:
        for m, training in self.modes:
            m.training = training
        for bn, momentum in self.momenta:
            bn.momentum = momentum
        with torch.no_grad():
            # The counters always go back: precise BN replaces statistics, it takes no
            # training step (update_bn leaves them at the number of batches it ran).
            for buffer, saved in self.buffers if statistics else self.counters:
                buffer.copy_(saved)


def pooled_precise_bn(
    model: nn.Module,
    inputs: Iterator[torch.Tensor],
    *,
    num_batches: int,
    autocast: Callable[[], AbstractContextManager[Any]],
) -> None:
    """Multigrid (`multigrid.precise_bn_batches`): BN statistics recomputed over `num_batches`
    batches of `inputs` before evaluation (PySlowFast), forward passes inside `autocast`, then
    pooled over ranks so that every rank evaluates the same model."""

    def forward(model: nn.Module, clips: torch.Tensor) -> object:
        with autocast():
            return model(clips)

    precise_bn(model, inputs, num_batches=num_batches, forward=forward)
    merge_running_statistics(model)
