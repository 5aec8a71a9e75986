"""Compressed gradient communication on 2 real gloo processes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.comm_hooks import CommConfig, HookName, attach_comm_hook
from vidscale.distributed.ddp import wrap_ddp
from vidscale.distributed.env import DistEnv


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def gradients(env: DistEnv, hook: HookName, steps: int) -> tuple[list[torch.Tensor], list[int]]:
    ddp = wrap_ddp(model(), env)
    comm = attach_comm_hook(ddp, CommConfig(hook=hook, powersgd_rank=2, powersgd_start_step=2))
    sent = []
    for step in range(steps):
        backward_on_random_batch(ddp, env, step, features=32)
        sent.append(comm.take())
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
