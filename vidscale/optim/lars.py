"""LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg, arXiv 1708.03888).

For every parameter tensor w with gradient g that is not excluded (see `param_groups`):

    trust = eta * ||w|| / (||g|| + wd * ||w|| + eps)      (1 when ||w|| = 0 or ||g|| = 0)
    d     = local * (g + wd * w)
    v     = momentum * v + d                              (v starts at 0, so v_1 = d)
    w     = w - lr * v                                    (nesterov: w - lr * (d + momentum * v))

with `local = trust` in scaling mode and `local = min(trust / lr, 1)` in clipping mode (`clip=True`,
NVIDIA Apex LARC): the effective step size is then `lr * local = min(trust, lr)`, so the global
schedule caps the layer-wise rate instead of multiplying it.

The learning rate stays outside the momentum buffer (Goyal et al., "Accurate, Large Minibatch
SGD", §2.1 momentum correction): when the schedule changes lr, the velocity is not rescaled, which
is the same convention as `torch.optim.SGD`. Excluded parameters (BN, biases) get neither weight
decay nor adaptation: for them this is plain momentum SGD. With `trust_coefficient=None` no
parameter is adapted and LARS is step for step `torch.optim.SGD(momentum, weight_decay, nesterov)`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from vidscale.optim.layerwise import LayerwiseOptimizer
from vidscale.optim.param_groups import EXCLUDE_KEY


class LARS(LayerwiseOptimizer):
    """Momentum SGD with a layer-wise trust ratio; see the module docstring for the update."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        *,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float | None = 1e-3,
        eps: float = 1e-8,
        clip: bool = False,
        nesterov: bool = False,
    ) -> None:
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        if trust_coefficient is not None and trust_coefficient <= 0:
            raise ValueError(f"trust_coefficient must be > 0 or None, got {trust_coefficient}")
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        if nesterov and momentum == 0:
            raise ValueError("nesterov needs momentum > 0")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "trust_coefficient": trust_coefficient,
            "eps": eps,
            "clip": clip,
            "nesterov": nesterov,
            EXCLUDE_KEY: False,
        }
        super().__init__(params, defaults)

    def _update(self, param: torch.Tensor, group: dict[str, Any]) -> None:
        grad = param.grad
        assert grad is not None
        if grad.is_sparse:
            raise RuntimeError("LARS does not support sparse gradients")
        excluded = bool(group[EXCLUDE_KEY])
        wd = 0.0 if excluded else float(group["weight_decay"])
        direction = grad.add(param, alpha=wd) if wd != 0.0 else grad.clone()
        if not excluded and group["trust_coefficient"] is not None:
            direction.mul_(_local_scale(param, grad, group, weight_decay=wd))
        momentum = float(group["momentum"])
        if momentum != 0.0:
            state = self.state[param]
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = direction.clone()
            else:
                buf.mul_(momentum).add_(direction)
            direction = direction.add(buf, alpha=momentum) if group["nesterov"] else buf
        param.add_(direction, alpha=-float(group["lr"]))


def _local_scale(
    param: torch.Tensor, grad: torch.Tensor, group: dict[str, Any], *, weight_decay: float
) -> torch.Tensor:
    """The layer's multiplier on (g + wd * w): trust, or min(trust / lr, 1) when clipping.

    Kept as a tensor (torch.where, no .item()) so the step never waits on the device.
    """
    w_norm = torch.linalg.vector_norm(param)
    g_norm = torch.linalg.vector_norm(grad)
    trust = (
        float(group["trust_coefficient"])
        * w_norm
        / (g_norm + weight_decay * w_norm + float(group["eps"]))
    )
    # A zero weight (fresh init) or zero gradient has no meaningful ratio: fall back to 1.
    trust = torch.where((w_norm > 0) & (g_norm > 0), trust, torch.ones_like(trust))
    if group["clip"]:
        lr = float(group["lr"])
        # min(trust / lr, 1); at lr = 0 nothing moves, so the scale is irrelevant: use 1.
        return torch.clamp(trust / lr, max=1.0) if lr > 0 else torch.ones_like(trust)
    return trust
