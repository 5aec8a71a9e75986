"""`FixedBatchStep`: the trainer's step on a fixed batch, what the probe and the benches time. It
must be `train_step` itself: the same update as a `StepContext` step on the same batch, bit for
bit, with the loss computed inside the autocast and the optimizer's update applied."""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager
from typing import Any

import pytest
import torch
from torch import nn

from vidscale.step.fixed_batch import CLIPS, FixedBatchStep, already_prepared, bench_sgd
from vidscale.step.run import StepContext, train_step


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(3, 4, 1), nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(4, 5))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(4, 3, 2, 4, 4, generator=g), torch.randint(0, 5, (4,), generator=g)


def test_it_is_the_trainers_step_bit_for_bit() -> None:
    clips, labels = batch()
    fixed_model, step_model = tiny(), tiny()
    fixed = FixedBatchStep(fixed_model, clips, labels, lr=0.1)
    ctx = StepContext(
        model=step_model,
        optimizer=bench_sgd(step_model),
        prepare=already_prepared,
        device=clips.device,
    )
    item = {"inputs": {CLIPS: clips}, "label": labels, "skipped": []}
    for _ in range(3):
        got = fixed()
        want = train_step(ctx, iter([item]), accumulate=1, clips=4, lr=0.1)
        assert (got.loss, got.hits, got.grad_norm) == (want.loss, want.hits, want.grad_norm)
    for a, b in zip(fixed_model.parameters(), step_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_each_call_updates_the_weights_with_the_default_sgd() -> None:
    clips, labels = batch()
    model = tiny()
    before = copy.deepcopy(model)
    result = FixedBatchStep(model, clips, labels, lr=0.1)()
    assert result.agreed.finite and result.clips == 4 and result.lr == 0.1
    moved = [
        not torch.equal(a, b) for a, b in zip(model.parameters(), before.parameters(), strict=True)
    ]
    assert all(moved)


class CountingAutocast:
    """An autocast stand-in that records whether the loss was computed inside it."""

    def __init__(self) -> None:
        self.inside = False
        self.loss_inside: list[bool] = []

    def __call__(self) -> AbstractContextManager[Any]:
        outer = self

        class Context:
            def __enter__(self) -> None:
                outer.inside = True

            def __exit__(self, *exc: object) -> None:
                outer.inside = False

        return Context()


def test_the_loss_is_computed_inside_the_autocast_as_training_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clips, labels = batch()
    autocast = CountingAutocast()
    original = nn.functional.cross_entropy

    def spying(*args: Any, **kwargs: Any) -> torch.Tensor:
        autocast.loss_inside.append(autocast.inside)
        return original(*args, **kwargs)

    monkeypatch.setattr(nn.functional, "cross_entropy", spying)
    FixedBatchStep(tiny(), clips, labels, autocast=autocast)()
    assert autocast.loss_inside == [True]
