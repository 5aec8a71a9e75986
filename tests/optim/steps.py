"""Shared helpers for optimizer tests: fixed-gradient trajectories and the Rosenbrock function."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from vidscale.optim.param_groups import EXCLUDE_KEY

W0 = (3.0, 4.0)  # ||w0|| = 5
G = (0.6, 0.8)  # ||g|| = 1, parallel to w0

MakeOptimizer = Callable[[list[dict[str, Any]]], torch.optim.Optimizer]


def fixed_gradient_trajectory(
    make: MakeOptimizer, lrs: Sequence[float], *, excluded: bool = False
) -> list[list[float]]:
    """Weights after each step from w0 = [3, 4] with g = [0.6, 0.8] every step (float64)."""
    w = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    opt = make([{"params": [w], EXCLUDE_KEY: excluded}])
    out = []
    for lr in lrs:
        for group in opt.param_groups:
            group["lr"] = lr
        w.grad = torch.tensor(G, dtype=torch.float64)
        opt.step()
        out.append(w.detach().tolist())
    return out


def rosenbrock(xy: torch.Tensor) -> torch.Tensor:
    """(1 - x)^2 + 100 (y - x^2)^2: a curved valley with its minimum 0 at (1, 1)."""
    return (1 - xy[0]) ** 2 + 100 * (xy[1] - xy[0] ** 2) ** 2


def minimise_rosenbrock(
    make: Callable[[list[torch.Tensor]], torch.optim.Optimizer], *, lr: float, steps: int
) -> torch.Tensor:
    """Run `steps` steps from (-1.5, 2) with a cosine-decayed rate; return the final point."""
    xy = torch.tensor([-1.5, 2.0], dtype=torch.float64, requires_grad=True)
    opt = make([xy])
    for k in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * k / steps))
        opt.zero_grad()
        rosenbrock(xy).backward()
        opt.step()
    return xy.detach()
