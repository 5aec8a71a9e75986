"""LAMB: layer-wise adaptive moments (You et al., "Large Batch Optimization for Deep Learning:
Training BERT in 76 minutes", arXiv 1904.00962, Algorithm 2 with bias correction, phi = identity).

For every parameter tensor w with gradient g, at step t = 1, 2, ...:

    m = beta1 * m + (1 - beta1) * g          m_hat = m / (1 - beta1^t)
    v = beta2 * v + (1 - beta2) * g^2        v_hat = v / (1 - beta2^t)
    r = m_hat / (sqrt(v_hat) + eps) + wd * w
    trust = ||w|| / ||r||                    (1 when ||w|| = 0 or ||r|| = 0)
    w = w - lr * trust * r

Excluded parameters (BN, biases; see `param_groups`) get no weight decay and trust 1, which makes
their update plain bias-corrected Adam.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from vidscale.optim.layerwise import LayerwiseOptimizer
from vidscale.optim.param_groups import EXCLUDE_KEY


class LAMB(LayerwiseOptimizer):
    """Adam moments with a layer-wise trust ratio; see the module docstring for the update."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            EXCLUDE_KEY: False,
        }
        super().__init__(params, defaults)

    def _update(self, param: torch.Tensor, group: dict[str, Any]) -> None:
        grad = param.grad
        assert grad is not None
        if grad.is_sparse:
            raise RuntimeError("LAMB does not support sparse gradients")
        beta1, beta2 = group["betas"]
        state = self.state[param]
        if not state:
            # A plain int step: it round-trips through state_dict without dtype casting.
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
        state["step"] += 1
        t = state["step"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = (exp_avg_sq / (1.0 - beta2**t)).sqrt_().add_(float(group["eps"]))
        update = (exp_avg / (1.0 - beta1**t)).div_(denom)
        lr = float(group["lr"])
        if group[EXCLUDE_KEY]:
            param.add_(update, alpha=-lr)
            return
        wd = float(group["weight_decay"])
        if wd != 0.0:
            update.add_(param, alpha=wd)
        w_norm = torch.linalg.vector_norm(param)
        r_norm = torch.linalg.vector_norm(update)
        # No .item(): the ratio stays on the device, so the step never waits on it.
        trust = torch.where((w_norm > 0) & (r_norm > 0), w_norm / r_norm, torch.ones_like(w_norm))
        param.add_(update.mul_(trust), alpha=-lr)
