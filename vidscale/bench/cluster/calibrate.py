"""What `bench cluster` measures on one process before its passes: the optimizer's part of a
one-node step (`optimizer_tail_s`: the stand-in waits it), the stand-in's own work
(`own_work_s`: taken off its waits), and the calibrated stand-in's step alone (`alone_step_s`:
the check that, without a peer, it takes the step it stands for).

A stand-in step is not only waits: it fills every parameter's gradient, computes the gradient
norm over them, runs autograd's chain of one node per layer and frees the gradients, as the
real step does inside the one-node time it was measured at. Waiting that whole time on top of
this work made a stand-in alone about a tenth slower than the real step (TSM-R50: 0.51-0.52 s
against 0.470 s, of which some 0.05 s its own CPU work), and so every cluster row slower
than the cluster it stands for. `own_work_s` measures that work with every wait zero, and the
ranks' profiles are shortened by it (`ComputeProfile.less`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from vidscale.bench.cluster.config import ClipShape
from vidscale.bench.cluster.standin import Clock, ComputeProfile, stand_in_with_sgd
from vidscale.models.costs import model_costs
from vidscale.models.registry import ModelConfig, build_model
from vidscale.step.fixed_batch import (
    FixedBatchStep,
    bench_sgd,
)

_WARMUP = 2  # the optimizer's first, real step and the allocator's first fills


def optimizer_tail_s(model: str, shape: ClipShape, *, reps: int = 3) -> float:
    """Seconds of the benches' SGD update and the gradient norm for `model` on this process
    with one thread: the part of a one-node step after backward (the stand-in waits it)."""
    torch.set_num_threads(1)
    cfg = ModelConfig(name=model, num_classes=shape.num_classes, frames=shape.frames)
    net = build_model(cfg)
    for param in net.parameters():
        param.grad = torch.full_like(param, 1e-3)
    optimizer = bench_sgd(net)
    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        torch.nn.utils.get_total_norm([p.grad for p in net.parameters() if p.grad is not None])
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def _alone(model: str, shape: ClipShape, profile: ComputeProfile) -> Callable[[], object]:
    """One process's stand-in step of `model` waiting `profile`: the trainer's step
    (`step.fixed_batch`) without a strategy, as a rank runs it less the communication."""
    torch.set_num_threads(1)
    cfg = ModelConfig(name=model, num_classes=shape.num_classes, frames=shape.frames, dropout=0.0)
    torch.manual_seed(0)
    real = build_model(cfg)
    costs = model_costs(model, frames=shape.frames, size=shape.size, num_classes=shape.num_classes)
    clock = Clock(shared_core=True)
    standin, optimizer = stand_in_with_sgd(
        real, costs, profile, num_classes=shape.num_classes, clock=clock
    )
    return FixedBatchStep(
        standin,
        torch.zeros(shape.batch, 1),  # the stand-in reads only the batch's size
        torch.zeros(shape.batch, dtype=torch.long),
        optimizer=optimizer,
    )


def _median_step_s(
    step: Callable[[], object], reps: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    times = []
    for index in range(_WARMUP + reps):
        start = clock()
        step()
        if index >= _WARMUP:
            times.append(clock() - start)
    return statistics.median(times)


def own_work_s(model: str, shape: ClipShape, *, reps: int = 5) -> float:
    """CPU seconds of a stand-in step of `model` whose waits are all zero: the work it does for
    real that the one-node step it waits already holds (see the module docstring). CPU time,
    not wall: on an idle core, where the one-node step was measured, they are the same, and
    other work on the machine lengthens the wall time of this work but not what it holds."""
    step = _alone(model, shape, ComputeProfile(0.0, 0.0, 0.0))
    return _median_step_s(step, reps, clock=time.thread_time)


def alone_step_s(model: str, shape: ClipShape, profile: ComputeProfile, *, reps: int = 3) -> float:
    """Seconds of a stand-in step of `model` waiting `profile`, on one process: with a
    calibrated profile, the one-node step it stands for."""
    return _median_step_s(_alone(model, shape, profile), reps)
