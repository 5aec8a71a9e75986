"""OptimConfig validation names the field; build_optimizer builds every optimizer with the split."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch
from torch import nn

from vidscale.optim.factory import OPTIMIZER_NAMES, OptimConfig, build_optimizer
from vidscale.optim.lamb import LAMB
from vidscale.optim.lars import LARS
from vidscale.optim.param_groups import EXCLUDE_KEY


def model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(12, 2))


def test_names_match_the_literal() -> None:
    hint = typing.get_type_hints(OptimConfig)["name"]
    assert typing.get_args(hint) == OPTIMIZER_NAMES


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("sgd", torch.optim.SGD),
        ("lars", LARS),
        ("lamb", LAMB),
        ("adamw", torch.optim.AdamW),
        ("adam", torch.optim.Adam),
    ],
)
def test_every_optimizer_decays_weights_only(name: str, kind: type) -> None:
    cfg = OptimConfig(name=name, weight_decay=3e-4)  # type: ignore[arg-type]
    opt = build_optimizer(model(), cfg, lr=0.2)
    assert isinstance(opt, kind)
    by_flag = {g[EXCLUDE_KEY]: g for g in opt.param_groups}
    assert by_flag[False]["weight_decay"] == 3e-4 and by_flag[True]["weight_decay"] == 0.0
    assert all(p.ndim > 1 for p in by_flag[False]["params"])
    assert all(p.ndim <= 1 for p in by_flag[True]["params"])
    assert all(g["lr"] == 0.2 for g in opt.param_groups)


def test_hyperparameters_reach_the_optimizer() -> None:
    cfg = OptimConfig(name="lars", momentum=0.8, nesterov=True, eta=2e-3, larc_clip=True, eps=0.0)
    group = build_optimizer(model(), cfg, lr=0.1).param_groups[0]
    assert (group["momentum"], group["nesterov"]) == (0.8, True)
    assert (group["trust_coefficient"], group["clip"], group["eps"]) == (2e-3, True, 0.0)
    group = build_optimizer(
        model(), OptimConfig(name="adamw", betas=(0.8, 0.99)), lr=0.1
    ).param_groups[0]
    assert group["betas"] == (0.8, 0.99) and group["eps"] == 1e-8


def test_one_step_lowers_the_loss_for_every_optimizer() -> None:
    for name in OPTIMIZER_NAMES:
        torch.manual_seed(0)
        net = nn.Linear(4, 1)
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        lr = 0.02 if name in ("lamb", "adamw", "adam") else 0.05
        cfg = OptimConfig(name=name, eta=0.1)  # type: ignore[arg-type]
        opt = build_optimizer(net, cfg, lr=lr)
        losses = []
        for _ in range(2):
            opt.zero_grad()
            loss = nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] < losses[0], name


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"accumulate": 0}, "accumulate"),
        ({"lr_per_8_clips": -0.1}, "lr_per_8_clips"),
        ({"lr_per_8_clips": float("nan")}, "lr_per_8_clips"),
        ({"momentum": 1.0}, "momentum"),
        ({"momentum": 0.0, "nesterov": True}, "nesterov"),
        ({"weight_decay": -1e-4}, "weight_decay"),
        ({"eta": 0.0}, "eta"),
        ({"betas": (0.9, 1.5)}, "betas"),
        ({"eps": -1.0}, "eps"),
        ({"name": "adagrad"}, "name"),
    ],
)
def test_validate_names_the_field(change: dict[str, object], field: str) -> None:
    cfg = dataclasses.replace(OptimConfig(), **change)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"^{field} "):
        cfg.validate()
    with pytest.raises(ValueError, match=f"^{field} "):
        build_optimizer(model(), cfg, lr=0.1)


def test_defaults_are_the_tsm_setting_and_valid() -> None:
    cfg = OptimConfig()
    cfg.validate()
    assert (cfg.name, cfg.lr_per_8_clips, cfg.momentum, cfg.weight_decay) == (
        "sgd",
        0.00125,
        0.9,
        1e-4,
    )


def test_negative_lr_is_rejected() -> None:
    with pytest.raises(ValueError, match="lr"):
        build_optimizer(model(), OptimConfig(), lr=-1.0)
