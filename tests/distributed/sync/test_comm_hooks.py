"""Compressed gradient communication on 2 real gloo processes."""

from __future__ import annotations

import itertools
import time

import pytest
import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.env import DistEnv
from vidscale.distributed.sync.comm_hooks import (
    BucketTimes,
    CommConfig,
    HookName,
    attach_comm_hook,
    exposed_seconds,
    union_seconds,
)
from vidscale.distributed.sync.ddp import gradient_sync, wrap_ddp
from vidscale.distributed.traffic import Traffic


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def gradients(env: DistEnv, hook: HookName, steps: int) -> tuple[list[torch.Tensor], list[int]]:
    ddp = wrap_ddp(model(), env)
    comm = attach_comm_hook(ddp, CommConfig(hook=hook, powersgd_rank=2, powersgd_start_step=2))
    sent = []
    for step in range(steps):
        backward_on_random_batch(ddp, env, step, features=32)
        sent.append(comm.take().bytes_sent)
    return [grad_of(p) for p in ddp.parameters()], sent


def grad_of(param: torch.Tensor) -> torch.Tensor:
    assert param.grad is not None
    return param.grad.clone()


def backward_on_random_batch(ddp: nn.Module, env: DistEnv, step: int, *, features: int) -> None:
    """One backward pass on 16 random samples, different per step and rank."""
    g = torch.Generator().manual_seed(100 * step + env.rank)
    x = torch.randn(16, features, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)
    ddp.zero_grad()
    nn.functional.cross_entropy(ddp(x), y).backward()


@pytest.mark.parametrize("hook", ["fp16", "bf16"])
def test_cast_hooks_match_uncompressed_within_1e_2(hook: str) -> None:
    exact = run_ranks(gradients, 2, "none", 1)
    compressed = run_ranks(gradients, 2, hook, 1)
    for (ge, sent_e), (gc, sent_c) in zip(exact, compressed, strict=True):
        for a, b in zip(ge, gc, strict=True):
            assert (a - b).norm() <= 1e-2 * a.norm()
        assert sent_c[0] * 2 == sent_e[0]  # half the bytes of fp32
    assert all(torch.equal(a, b) for a, b in zip(compressed[0][0], compressed[1][0], strict=True))


def test_powersgd_compresses_after_its_warmup_steps() -> None:
    results = run_ranks(gradients, 2, "powersgd", 4)
    grads, sent = results[0]
    assert all(torch.isfinite(g).all() for g in grads)
    assert sent[3] < sent[0] / 4  # rank-2 factors of 64x32 and 10x64 matrices vs full tensors
    assert all(torch.equal(a, b) for a, b in zip(results[0][0], results[1][0], strict=True))


def deep_model() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(48, 48), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(48, 10))


def many_bucket_steps(env: DistEnv, steps: int) -> list[torch.Tensor]:
    # A bucket per layer or two: several buckets' factor all-reduces are in flight at once.
    ddp = wrap_ddp(deep_model(), env, bucket_cap_mb=0.01)
    attach_comm_hook(ddp, CommConfig(hook="powersgd", powersgd_rank=2, powersgd_start_step=2))
    for step in range(steps):
        backward_on_random_batch(ddp, env, step, features=48)
    return [grad_of(p) for p in ddp.parameters()]


def test_powersgd_with_many_buckets_keeps_ranks_in_step() -> None:
    """Gloo runs a bucket's chained all-reduces from callback threads; unless each bucket
    finishes before the next starts, ranks issue the collectives in different orders."""
    grads = run_ranks(many_bucket_steps, 2, 12, timeout=120)
    assert all(torch.equal(a, b) for a, b in zip(grads[0], grads[1], strict=True))


def param_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def one_step_traffic(env: DistEnv, hook: HookName) -> tuple[Traffic, Traffic, float, int]:
    """take() after one synchronised step, take() again, the step's wall time, fp32 bytes."""
    ddp = wrap_ddp(model(), env)
    comm = attach_comm_hook(ddp, CommConfig(hook=hook, powersgd_rank=2, powersgd_start_step=2))
    start = time.perf_counter()
    backward_on_random_batch(ddp, env, 0, features=32)
    wall = time.perf_counter() - start
    return comm.take(), comm.take(), wall, param_bytes(ddp)


# Bytes sent per fp32 gradient byte; PowerSGD's first steps are plain all-reduces (warm-up).
@pytest.mark.parametrize(
    ("hook", "ratio"), [("none", 1.0), ("fp16", 0.5), ("bf16", 0.5), ("powersgd", 1.0)]
)
def test_take_reports_one_steps_traffic_then_nothing(hook: str, ratio: float) -> None:
    for first, second, wall, fp32_bytes in run_ranks(one_step_traffic, 2, hook):
        assert first.bytes_sent == fp32_bytes * ratio
        assert first.rounds == 1
        assert 0 < first.seconds < wall
        assert second == Traffic()


def test_union_counts_overlapping_all_reduces_once() -> None:
    assert union_seconds([]) == 0.0
    assert union_seconds([(0.0, 1.0), (2.0, 3.0)]) == 2.0  # apart
    assert union_seconds([(1.0, 3.0), (0.0, 2.0)]) == 3.0  # overlapping, in any order
    assert union_seconds([(0.0, 4.0), (1.0, 2.0), (3.0, 5.0)]) == 5.0  # nested, then past


def test_exposed_time_is_the_hook_calls_and_the_wait_after_the_last_bucket() -> None:
    # Bucket 0's hook holds the thread 0.1 s, its all-reduce ends at 2.0; the last bucket is
    # handed over at 1.0 (the backward compute is done): the step waits from 1.0 to 2.0.
    overlapped = [BucketTimes(0.0, 0.1, 2.0), BucketTimes(1.0, 1.1, 1.5, last=True)]
    assert exposed_seconds(overlapped) == pytest.approx(0.1 + 1.0)
    # A hook that blocks until its all-reduce is done (PowerSGD on gloo): all of it.
    blocking = [BucketTimes(0.0, 0.5, 0.5), BucketTimes(1.0, 1.4, 1.4, last=True)]
    assert exposed_seconds(blocking) == pytest.approx(0.9)
    # A pass whose last bucket was not launched: its hook calls only.
    assert exposed_seconds([BucketTimes(0.0, 0.1, 2.0)]) == pytest.approx(0.1)
    assert exposed_seconds([]) == 0.0


def many_bucket_traffic(env: DistEnv, hook: HookName) -> tuple[Traffic, Traffic, float]:
    """take() after a synchronised step with many buckets (PowerSGD compressing), take()
    again, and the step's wall time."""
    ddp = wrap_ddp(deep_model(), env, bucket_cap_mb=0.01)
    comm = attach_comm_hook(ddp, CommConfig(hook=hook, powersgd_rank=2, powersgd_start_step=2))
    for step in range(3):
        backward_on_random_batch(ddp, env, step, features=48)
        comm.take()
    start = time.perf_counter()
    backward_on_random_batch(ddp, env, 3, features=48)
    wall = time.perf_counter() - start
    return comm.take(), comm.take(), wall


@pytest.mark.parametrize("hook", ["none", "powersgd"])
def test_exposed_time_lies_within_the_time_in_flight(hook: str) -> None:
    for traffic, after, wall in run_ranks(many_bucket_traffic, 2, hook):
        assert traffic.rounds == 1
        assert 0 < traffic.exposed_seconds <= traffic.seconds < wall
        assert after == Traffic()


def conv_bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


Trace = list[list[torch.Tensor]]  # per step: the gradients, then the parameters after SGD


def sgd_trace(env: DistEnv, hook: HookName | None, steps: int) -> tuple[Trace, Traffic]:
    """Steps as the trainer runs them (`zero_grad(set_to_none=True)`; from the second step on,
    two micro-batches, the first under no_sync); DDP without any hook when `hook` is None."""
    ddp = wrap_ddp(conv_bn_model(), env)
    comm = attach_comm_hook(ddp, CommConfig(hook=hook)) if hook is not None else None
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    trace: Trace = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        micro_batches = 1 if step == 0 else 2
        for micro in range(micro_batches):
            g = torch.Generator().manual_seed(1000 * step + 10 * micro + env.rank)
            x = torch.randn(4, 3, 8, 8, generator=g)
            y = torch.randint(0, 10, (4,), generator=g)
            with gradient_sync(ddp, sync=micro == micro_batches - 1):
                nn.functional.cross_entropy(ddp(x), y).backward()
        grads = [grad_of(p) for p in ddp.parameters()]
        optimizer.step()
        trace.append(grads + [p.detach().clone() for p in ddp.parameters()])
    return trace, comm.take() if comm is not None else Traffic()


def native_and_timed(env: DistEnv, steps: int) -> tuple[Trace, Trace, Traffic, int]:
    native, _ = sgd_trace(env, None, steps)
    timed, traffic = sgd_trace(env, "none", steps)
    return native, timed, traffic, param_bytes(conv_bn_model())


@pytest.mark.parametrize("world", [2, 3])
def test_timed_plain_all_reduce_is_bitwise_native_ddp(world: int) -> None:
    """comm.hook=none runs a Python hook (to time it): it must not change a bit of training.
    3 ranks: 1/3 is inexact, and torch's allreduce_hook (x / 3, not x * (1/3)) fails here."""
    steps = 3
    for native, timed, traffic, fp32_bytes in run_ranks(native_and_timed, world, steps):
        pairs = zip(itertools.chain(*native), itertools.chain(*timed), strict=True)
        assert all(torch.equal(a, b) for a, b in pairs)
        # Micro-batches under no_sync send nothing: one round (one gradient's worth) per step.
        assert traffic.rounds == steps and traffic.bytes_sent == steps * fp32_bytes
