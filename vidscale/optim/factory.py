"""The optimizer config and `build_optimizer`: one place that turns a config into an optimizer.

Defaults are the TSM paper's Kinetics setting (§4): momentum SGD, 0.00125 per 8 clips scaled
linearly with the global batch (the scaling itself lives in `vidscale.schedules.lr.scaled_lr`),
weight decay 1e-4 on weights only. Every optimizer gets the same two parameter groups from
`split_decay_groups`, so BN parameters and biases are never decayed, whichever optimizer is used.

`adam` is torch's Adam, the optimizer of the AAVG paper (Cong et al., §III-A and §IV), whose
weight decay is coupled L2 (added to the gradient before the moments); `adamw` decouples it
(Loshchilov & Hutter). Both decay the weight group only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from vidscale.optim.lamb import LAMB
from vidscale.optim.lars import LARS
from vidscale.optim.param_groups import split_decay_groups

OptimizerName = Literal["sgd", "lars", "lamb", "adamw", "adam"]
OPTIMIZER_NAMES: tuple[str, ...] = ("sgd", "lars", "lamb", "adamw", "adam")


@dataclass
class OptimConfig:
    """Which optimizer and its hyper-parameters; `lr_per_8_clips` is the unscaled rate.

    `accumulate` micro-batches make one optimizer step (the loop reads it).
    `simulate_world_size = N` (0: off) instead derives it as N / actual world size, so a recipe
    written for N GPUs runs on fewer with the same global batch (TSM paper Table 3, rows marked *).
    `eta` is the LARS
    trust coefficient and `larc_clip` selects LARC's clipping mode; `betas` and `eps` are used by
    LAMB, Adam and AdamW (and `eps` by LARS's trust-ratio denominator).
    """

    name: OptimizerName = "sgd"
    lr_per_8_clips: float = 0.00125
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 1e-4
    accumulate: int = 1
    simulate_world_size: int = 0
    eta: float = 1e-3
    larc_clip: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip_grad_norm: float = 0.0  # > 0: scale gradients to at most this global L2 norm

    def validate(self) -> None:
        """Raise ValueError naming the first field whose value cannot work."""
        checks: list[tuple[bool, str]] = [
            (self.name in OPTIMIZER_NAMES, f"name must be one of {list(OPTIMIZER_NAMES)}"),
            (_finite_at_least(self.lr_per_8_clips, 0.0), "lr_per_8_clips must be >= 0"),
            (0.0 <= self.momentum < 1.0, "momentum must be in [0, 1)"),
            (not self.nesterov or self.momentum > 0, "nesterov needs momentum > 0"),
            (_finite_at_least(self.weight_decay, 0.0), "weight_decay must be >= 0"),
            (self.accumulate >= 1, "accumulate must be >= 1"),
            (_finite_at_least(self.clip_grad_norm, 0.0), "clip_grad_norm must be >= 0 (0: off)"),
            (self.simulate_world_size >= 0, "simulate_world_size must be >= 0 (0: off)"),
            (math.isfinite(self.eta) and self.eta > 0, "eta must be > 0"),
            (
                len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
                "betas must be two values in [0, 1)",
            ),
            (_finite_at_least(self.eps, 0.0), "eps must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                field_name = message.split()[0]
                got = getattr(self, field_name)
                raise ValueError(f"{message}, got {got!r}")


def effective_accumulate(cfg: OptimConfig, *, world_size: int) -> int:
    """Micro-batches per optimizer step on `world_size` processes."""
    if cfg.simulate_world_size == 0:
        return cfg.accumulate
    if cfg.simulate_world_size % world_size:
        raise ValueError(
            f"simulate_world_size={cfg.simulate_world_size} is not a multiple of the "
            f"{world_size} processes running"
        )
    return cfg.accumulate * cfg.simulate_world_size // world_size


def _finite_at_least(value: float, low: float) -> bool:
    return math.isfinite(value) and value >= low


def build_optimizer(model: nn.Module, cfg: OptimConfig, *, lr: float) -> torch.optim.Optimizer:
    """Build the optimizer named by `cfg` over `model`'s trainable parameters, at rate `lr`.

    `lr` is the starting rate of every group; the training loop overwrites `group["lr"]` each
    step from the schedule. Weight decay applies to ndim >= 2 parameters only (see
    `split_decay_groups`); LARS and LAMB also skip their trust ratio on the excluded group.
    """
    cfg.validate()
    if not (math.isfinite(lr) and lr >= 0):
        raise ValueError(f"lr must be >= 0, got {lr!r}")
    groups = split_decay_groups(model, weight_decay=cfg.weight_decay)
    match cfg.name:
        case "sgd":
            return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov)
        case "lars":
            return LARS(
                groups,
                lr=lr,
                momentum=cfg.momentum,
                trust_coefficient=cfg.eta,
                eps=cfg.eps,
                clip=cfg.larc_clip,
                nesterov=cfg.nesterov,
            )
        case "lamb":
            return LAMB(groups, lr=lr, betas=cfg.betas, eps=cfg.eps)
        case "adamw":
            return torch.optim.AdamW(groups, lr=lr, betas=cfg.betas, eps=cfg.eps)
        case "adam":
            return torch.optim.Adam(groups, lr=lr, betas=cfg.betas, eps=cfg.eps)
    raise ValueError(f"name must be one of {list(OPTIMIZER_NAMES)}, got {cfg.name!r}")
