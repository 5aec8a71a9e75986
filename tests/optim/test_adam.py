"""`adam` (the AAVG paper's optimizer): Adam with coupled L2 decay on the weight group only,
checked step by step against the update written out (Kingma & Ba, Alg. 1, plus L2 in the
gradient), and told apart from AdamW's decoupled decay."""

from __future__ import annotations

import torch
from torch import nn

from vidscale.optim.factory import OptimConfig, build_optimizer

BETAS = (0.9, 0.999)
EPS = 1e-8


def reference_adam(
    w: torch.Tensor, grads: list[torch.Tensor], *, lr: float, weight_decay: float
) -> list[torch.Tensor]:
    """The weights after each step of Adam on `grads`, with L2 added to the gradient first."""
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    out = []
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * w  # coupled: the decay goes through the moments
        m = BETAS[0] * m + (1 - BETAS[0]) * g
        v = BETAS[1] * v + (1 - BETAS[1]) * g * g
        m_hat, v_hat = m / (1 - BETAS[0] ** t), v / (1 - BETAS[1] ** t)
        w = w - lr * m_hat / (v_hat.sqrt() + EPS)
        out.append(w)
    return out


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def test_adam_matches_the_reference_on_both_groups() -> None:
    torch.manual_seed(0)
    model = net().double()
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: [torch.randn_like(p) for _ in range(4)] for n, p in model.named_parameters()}
    opt = build_optimizer(model, OptimConfig(name="adam", weight_decay=0.1), lr=0.01)
    assert type(opt) is torch.optim.Adam
    params = dict(model.named_parameters())
    for step in range(4):
        for name, p in params.items():
            p.grad = grads[name][step].clone()
        opt.step()
    for name, p in params.items():
        decay = 0.1 if p.ndim > 1 else 0.0  # BN and biases are never decayed
        want = reference_adam(start[name], grads[name], lr=0.01, weight_decay=decay)[-1]
        torch.testing.assert_close(p.detach(), want, rtol=0.0, atol=1e-12, msg=name)


def test_adam_decay_is_coupled_not_decoupled() -> None:
    # The same decayed weight after one step under adam and adamw differs: Adam's decay is
    # normalised by sqrt(v) with the gradient, AdamW's is subtracted as lr * wd * w.
    finals = {}
    for name in ("adam", "adamw"):
        w = nn.Linear(2, 1, bias=False).double()
        with torch.no_grad():
            w.weight.copy_(torch.tensor([[3.0, 4.0]], dtype=torch.float64))
        opt = build_optimizer(w, OptimConfig(name=name, weight_decay=0.5), lr=0.1)  # type: ignore[arg-type]
        w.weight.grad = torch.tensor([[1e-3, 1e-3]], dtype=torch.float64)
        opt.step()
        finals[name] = w.weight.detach().clone()
    # Adam: g + wd w = [1.501, 2.001]; the first step is lr * sign = 0.1 per weight.
    torch.testing.assert_close(
        finals["adam"], torch.tensor([[2.9, 3.9]], dtype=torch.float64), rtol=0.0, atol=1e-6
    )
    # AdamW: w (1 - lr wd) - lr sign(g) = [3 x 0.95 - 0.1, 4 x 0.95 - 0.1].
    torch.testing.assert_close(
        finals["adamw"], torch.tensor([[2.75, 3.7]], dtype=torch.float64), rtol=0.0, atol=1e-6
    )
