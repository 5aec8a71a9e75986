"""LARS against the design brief's §6 vectors, hand-worked LARC vectors, torch SGD, and Rosenbrock."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from tests.optim.steps import fixed_gradient_trajectory, minimise_rosenbrock
from vidscale.optim.lars import LARS
from vidscale.optim.param_groups import split_decay_groups

TOL = 1e-9


def design_lars(groups: list[dict[str, Any]], *, clip: bool = False) -> LARS:
    return LARS(
        groups, lr=0.1, momentum=0.9, weight_decay=0.01, trust_coefficient=1e-3, eps=0.0, clip=clip
    )


def assert_close(got: list[list[float]], want: list[list[float]]) -> None:
    torch.testing.assert_close(
        torch.tensor(got, dtype=torch.float64),
        torch.tensor(want, dtype=torch.float64),
        rtol=0.0,
        atol=TOL,
    )


def test_design_vector_three_steps() -> None:
    # Since w stays parallel to g, trust * (g + wd w) = eta ||w|| g / ||g||: step 1 adds
    # 0.1 * [0.003, 0.004], and the momentum then accumulates.
    got = fixed_gradient_trajectory(design_lars, [0.1, 0.1, 0.1])
    assert_close(
        got, [[2.9997, 3.9996], [2.99913003, 3.99884004], [2.998317143997, 3.997756191996]]
    )


def test_design_vector_lr_outside_momentum() -> None:
    # lr 0.1 -> 0.05 -> 0.025: the DESIGN "step 2" value is the second step, taken at lr 0.05:
    # v2 = 0.9 [0.003, 0.004] + 0.0049995 [0.6, 0.8] = [0.0056997, 0.0075996];
    # w2 = [2.9997, 3.9996] - 0.05 v2 = [2.999415015, 3.99922002] (the velocity is not rescaled).
    # Step 3: ||w2|| = 4.999025025, v3 = 0.9 v2 + 0.004999025025 [0.6, 0.8]
    #   = [0.008129145015, 0.01083886002]; w3 = w2 - 0.025 v3.
    got = fixed_gradient_trajectory(design_lars, [0.1, 0.05, 0.025])
    assert_close(
        got,
        [[2.9997, 3.9996], [2.999415015, 3.99922002], [2.999211786374625, 3.9989490484995]],
    )


def test_design_vector_excluded_parameter() -> None:
    # Excluded: no weight decay, no trust ratio: w - 0.1 g.
    got = fixed_gradient_trajectory(design_lars, [0.1], excluded=True)
    assert_close(got, [[2.94, 3.92]])


def test_larc_clip_scaling_branch() -> None:
    # clip: local = min(trust / lr, 1). trust = 1e-3 * 5 / (1 + 0.01 * 5) = 0.005 / 1.05 < lr, so
    # local = trust / 0.1 and d1 = local * [0.63, 0.84] = [0.03, 0.04]; w1 = w0 - 0.1 d1
    # = [2.997, 3.996] (effective rate min(trust, lr) = trust, ten times the scaling mode's step).
    # Step 2: ||w1|| = 4.995, trust * (g + wd w1) = 0.004995 [0.6, 0.8] = [0.002997, 0.003996];
    # d2 = that / 0.1 = [0.02997, 0.03996]; v2 = 0.9 [0.03, 0.04] + d2 = [0.05697, 0.07596];
    # w2 = w1 - 0.1 v2 = [2.991303, 3.988404].
    got = fixed_gradient_trajectory(lambda g: design_lars(g, clip=True), [0.1, 0.1])
    assert_close(got, [[2.997, 3.996], [2.991303, 3.988404]])


def test_larc_clip_capping_branch() -> None:
    # eta = 1, wd = 0: trust = 5 / 1 = 5 > lr, so local = min(50, 1) = 1 and d1 = g:
    # w1 = [3, 4] - 0.1 [0.6, 0.8] = [2.94, 3.92]. Step 2: trust = 4.9, still capped;
    # v2 = 0.9 g + g = [1.14, 1.52]; w2 = w1 - 0.1 v2 = [2.826, 3.768].
    def make(groups: list[dict[str, Any]]) -> LARS:
        return LARS(groups, lr=0.1, momentum=0.9, trust_coefficient=1.0, eps=0.0, clip=True)

    assert_close(fixed_gradient_trajectory(make, [0.1, 0.1]), [[2.94, 3.92], [2.826, 3.768]])


def test_zero_weight_gets_trust_one() -> None:
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = LARS([w], lr=0.5, momentum=0.0, weight_decay=0.01, eps=0.0)
    w.grad = torch.tensor([1.0, -2.0], dtype=torch.float64)
    opt.step()
    assert w.detach().tolist() == [-0.5, 1.0]


def small_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3)
    ).double()


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, *, steps: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for k in range(steps):
        for group in opt.param_groups:
            group["lr"] = 0.1 / (k + 1)  # a changing rate exercises lr-outside-momentum too
        x = torch.randn(5, 2, 6, 6, dtype=torch.float64, generator=gen)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("nesterov", [False, True])
def test_without_adaptation_equals_torch_sgd(nesterov: bool) -> None:
    ours, ref = small_net(), small_net()
    groups = split_decay_groups(ours, weight_decay=1e-2)
    opt = LARS(groups, lr=0.1, momentum=0.9, trust_coefficient=None, nesterov=nesterov)
    # Same decay split for the reference, so BN/bias are undecayed in both.
    sgd = torch.optim.SGD(
        split_decay_groups(ref, weight_decay=1e-2), lr=0.1, momentum=0.9, nesterov=nesterov
    )
    for step in range(4):
        train_steps(ours, opt, steps=1, seed=step)
        train_steps(ref, sgd, steps=1, seed=step)
        for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_adaptation_changes_the_step() -> None:
    # Guard against the equivalence test passing because adaptation never runs.
    ours, ref = small_net(), small_net()
    train_steps(ours, LARS(split_decay_groups(ours, weight_decay=1e-2), lr=0.1), steps=1, seed=0)
    sgd = torch.optim.SGD(split_decay_groups(ref, weight_decay=1e-2), lr=0.1, momentum=0.9)
    train_steps(ref, sgd, steps=1, seed=0)
    conv_ours, conv_ref = ours.get_parameter("0.weight"), ref.get_parameter("0.weight")
    assert not torch.allclose(conv_ours, conv_ref)
    # BN scale: excluded, so plain momentum SGD in both.
    torch.testing.assert_close(ours.get_parameter("1.weight"), ref.get_parameter("1.weight"))


@pytest.mark.parametrize("clip", [False, True])
def test_state_dict_round_trip(clip: bool) -> None:
    model = small_net()
    opt = LARS(split_decay_groups(model, weight_decay=1e-2), lr=0.1, clip=clip)
    train_steps(model, opt, steps=3, seed=1)
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())

    resumed = small_net()
    resumed.load_state_dict(saved_model)
    opt2 = LARS(split_decay_groups(resumed, weight_decay=1e-2), lr=0.0)
    opt2.load_state_dict(saved_opt)
    assert opt2.param_groups[0]["clip"] == clip

    train_steps(model, opt, steps=3, seed=2)
    train_steps(resumed, opt2, steps=3, seed=2)
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_converges_on_rosenbrock() -> None:
    # Effective step is lr * eta * ||w|| along the normalised gradient, hence lr = 10 for eta 1e-3.
    xy = minimise_rosenbrock(lambda p: LARS(p, lr=10.0, momentum=0.9), lr=10.0, steps=1000)
    assert torch.allclose(xy, torch.ones(2, dtype=torch.float64), atol=1e-2)


def test_rejects_bad_hyperparameters() -> None:
    w = [torch.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="momentum"):
        LARS(w, lr=0.1, momentum=1.0)
    with pytest.raises(ValueError, match="trust_coefficient"):
        LARS(w, lr=0.1, trust_coefficient=0.0)
    with pytest.raises(ValueError, match="nesterov"):
        LARS(w, lr=0.1, momentum=0.0, nesterov=True)
