"""LAMB against the design brief's §6 vector, torch Adam (excluded group), and Rosenbrock."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from tests.optim.steps import fixed_gradient_trajectory, minimise_rosenbrock
from vidscale.optim.lamb import LAMB
from vidscale.optim.param_groups import EXCLUDE_KEY, split_decay_groups


def design_lamb(groups: list[dict[str, Any]]) -> LAMB:
    return LAMB(groups, lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)


def test_design_vector_two_steps() -> None:
    # Step 1: m_hat = g, v_hat = g^2, so r = g / (|g| + 1e-6) + 0.01 w ~ [1.03, 1.04] and
    # trust = 5 / ||r|| ~ 3.416: the step is lr * ||w|| along r / ||r||.
    got = fixed_gradient_trajectory(design_lamb, [0.1, 0.1])
    torch.testing.assert_close(
        torch.tensor(got, dtype=torch.float64),
        torch.tensor(
            [[2.648158776297606, 3.644742694229095], [2.331135235505106, 3.3246411217562786]],
            dtype=torch.float64,
        ),
        rtol=0.0,
        atol=1e-9,
    )


def test_excluded_group_is_plain_adam() -> None:
    torch.manual_seed(0)
    ours = torch.randn(5, dtype=torch.float64, requires_grad=True)
    ref = ours.detach().clone().requires_grad_(True)
    lamb = LAMB([{"params": [ours], EXCLUDE_KEY: True}], lr=0.05, eps=1e-6, weight_decay=0.1)
    adam = torch.optim.Adam([ref], lr=0.05, eps=1e-6)
    for _ in range(5):
        grad = torch.randn(5, dtype=torch.float64)
        ours.grad, ref.grad = grad.clone(), grad.clone()
        lamb.step()
        adam.step()
        torch.testing.assert_close(ours, ref, rtol=0.0, atol=1e-12)


def test_trust_ratio_sets_step_length_to_lr_times_weight_norm() -> None:
    # Fresh state: |m_hat / (sqrt(v_hat) + 0)| = 1 elementwise, so with wd 0 the step is
    # lr * ||w|| * sign(g) / sqrt(n), whatever the gradient's scale.
    w = torch.tensor([1.0, -2.0, 2.0, 4.0], dtype=torch.float64, requires_grad=True)  # ||w|| = 5
    opt = LAMB([w], lr=0.1, eps=0.0)
    w.grad = torch.tensor([1e-3, -50.0, 2.0, -7.0], dtype=torch.float64)
    opt.step()
    step = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64) * 0.1 * 5 / 2
    torch.testing.assert_close(
        w.detach(), torch.tensor([1.0, -2.0, 2.0, 4.0], dtype=torch.float64) - step
    )


def test_zero_weight_gets_trust_one() -> None:
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = LAMB([w], lr=0.1, eps=0.0, weight_decay=0.5)
    w.grad = torch.tensor([3.0, -0.5], dtype=torch.float64)
    opt.step()
    torch.testing.assert_close(w.detach(), torch.tensor([-0.1, 0.1], dtype=torch.float64))


def small_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.Tanh(), nn.Linear(6, 2)).double()


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, *, steps: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(7, 4, dtype=torch.float64, generator=gen)).pow(2).mean().backward()
        opt.step()


def test_state_dict_round_trip() -> None:
    model = small_net()
    opt = LAMB(split_decay_groups(model, weight_decay=0.01), lr=0.01)
    train_steps(model, opt, steps=3, seed=1)
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())

    resumed = small_net()
    resumed.load_state_dict(saved_model)
    opt2 = LAMB(split_decay_groups(resumed, weight_decay=0.01), lr=0.01)
    opt2.load_state_dict(saved_opt)
    assert all(s["step"] == 3 for s in opt2.state.values())

    train_steps(model, opt, steps=3, seed=2)
    train_steps(resumed, opt2, steps=3, seed=2)
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_converges_on_rosenbrock() -> None:
    # The step length is about lr * ||w||, so LAMB crawls where the path passes near the origin;
    # 1500 steps at lr 0.05 (cosine-decayed) get through and settle at (1, 1).
    xy = minimise_rosenbrock(lambda p: LAMB(p, lr=0.05), lr=0.05, steps=1500)
    assert torch.allclose(xy, torch.ones(2, dtype=torch.float64), atol=1e-2)


def test_rejects_bad_hyperparameters() -> None:
    w = [torch.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="betas"):
        LAMB(w, lr=0.1, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="weight_decay"):
        LAMB(w, lr=0.1, weight_decay=-1.0)
