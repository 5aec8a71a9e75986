"""Data parallelism on 2 real gloo processes: identical gradients, accumulation == big batch."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from vidscale.data.inputs import ModelInput
from vidscale.distributed.env import DistEnv
from vidscale.distributed.sync.ddp import gradient_sync, wrap_ddp
from vidscale.step.run import StepContext, train_step

GLOBAL = 8  # clips per optimizer step over all ranks and micro-batches


def tiny_model() -> nn.Module:
    """A small video model without BN: (N, C, T, H, W) -> (N, K)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv3d(3, 4, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(4, 5),
    ).double()


def global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    clips = torch.randint(0, 256, (GLOBAL, 3, 4, 8, 8), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 5, (GLOBAL,), generator=g)
    return clips, labels


class Scaled(ModelInput):
    """The batch's RGB clips in float64 over 255 (the gradients are compared in float64)."""

    def normalize(self, clips: torch.Tensor) -> torch.Tensor:
        return clips.double() / 255.0


prepare = Scaled("rgb", 3)


def micro_batches(clips: torch.Tensor, labels: torch.Tensor, size: int):
    for i in range(0, clips.shape[0], size):
        yield {"inputs": {"rgb": clips[i : i + size]}, "label": labels[i : i + size], "skipped": []}


def one_step(model: nn.Module, batches, accumulate: int, clips: int) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    # Capture the all-reduced gradient: lr = 1 and zero-initialised momentum-free SGD means
    # w_new = w - g, so g = w_old - w_new.
    before = [p.detach().clone() for p in model.parameters()]
    context = StepContext(
        model=model,
        optimizer=opt,
        prepare=prepare,
        device=torch.device("cpu"),
        micro_batch=lambda last: gradient_sync(model, sync=last),
    )
    train_step(context, iter(batches), accumulate=accumulate, clips=clips, lr=1.0)
    return [b - p.detach() for b, p in zip(before, model.parameters(), strict=True)]


def reference_gradient() -> list[torch.Tensor]:
    clips, labels = global_batch()
    return one_step(tiny_model(), micro_batches(clips, labels, GLOBAL), accumulate=1, clips=GLOBAL)


def rank_gradient(env: DistEnv, accumulate: int) -> list[torch.Tensor]:
    clips, labels = global_batch()
    per_rank = GLOBAL // env.world_size
    mine = slice(env.rank * per_rank, (env.rank + 1) * per_rank)
    model = wrap_ddp(tiny_model(), env)
    batches = micro_batches(clips[mine], labels[mine], per_rank // accumulate)
    return one_step(model, batches, accumulate, clips=per_rank)


def test_ranks_get_identical_gradients_equal_to_the_global_batch() -> None:
    grads = run_ranks(rank_gradient, 2, 1)
    ref = reference_gradient()
    for a, b, r in zip(grads[0], grads[1], ref, strict=True):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, r, atol=1e-6, rtol=0)


def test_accumulation_over_micro_batches_equals_the_big_batch() -> None:
    grads = run_ranks(rank_gradient, 2, 4)  # 2 ranks x 4 micro-batches of 1 clip
    ref = reference_gradient()
    for a, b, r in zip(grads[0], grads[1], ref, strict=True):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, r, atol=1e-6, rtol=0)
    assert all(g.abs().sum() > 0 for g in itertools.chain(grads[0]))
