"""Whether a fast-path setting trains: its gradients against fp32's, on the run's model and shape.

The probe times settings; timing says nothing of whether a setting's arithmetic is right. Some
bf16 convolution kernels of torch 2.13's CPU build give wrong weight gradients at particular
shapes and thread counts, finite garbage or NaN (docs/benchmarks.md, "bf16 kernels that give
wrong gradients"): a run in such a setting skips every step, or worse, applies garbage. So
before a setting is timed, one forward and backward of the run's model on the probe's batch,
from the same weights, is compared with fp32's (`wrong_gradient`), and a setting whose
gradients are not fp32's is left out, with the first wrong parameter named.

The metric has to tell a kernel bug from bf16's ordinary rounding. At random initialisation a
healthy bf16 step is far from fp32's in direction (the global cosine of TSM-R50's gradients is
about 0.5, I3D-R50's under 0.1: BatchNorm over a few clips amplifies rounding), but every
tensor's gradient norm stays within a small factor of fp32's: 0.3-2.1x over TSM, TSN, I3D,
SlowFast and ResNet-50 at ordinary shapes, up to 16x where BatchNorm normalises over two values
(TSM-R18, one clip of 2 frames at 32²: its last stage sees 1x1 pixels). The broken kernels give
1e17-1e38 or NaN where fp32's norm is around 100. So a gradient is wrong when it is not finite
where fp32's is, or when its L2 norm is more than `NORM_FACTOR` (1000) times fp32's (above a
floor for tensors whose fp32 gradient is next to zero), or less than 1/`NORM_FACTOR` of it: a
direction test would reject healthy bf16; this width passes rounding, however amplified by a
degenerate batch, with 60x to spare, and is 1e12 short of any broken kernel seen.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from vidscale.step.fixed_batch import CLIPS, already_prepared
from vidscale.step.run import StepContext, forward_backward

NORM_FACTOR = 1000.0  # a gradient norm this many times fp32's (or 1/this) is wrong
# Tensors whose fp32 gradient norm is below this share of the median tensor's are compared
# against the floor instead: their own norm is rounding noise, and a ratio of noise means nothing.
FLOOR_SHARE = 1e-3
CHECK_VERSION = "grad1000"  # names the check in the probe's cache key: a new check measures again
# The check steps nothing: its context's optimizer is one over no parameters, never called.
_NO_UPDATE = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)


def gradients(
    model: nn.Module,
    clips: torch.Tensor,
    labels: torch.Tensor,
    *,
    autocast: Callable[[], AbstractContextManager[Any]],
) -> dict[str, torch.Tensor]:
    """The parameters' gradients (float32 copies, by name) of one forward and backward of
    `model` on (`clips`, `labels`) as the training step runs them (`step.run.forward_backward`:
    inside `autocast`, cross-entropy in float32); the model's own `.grad` are left cleared."""
    model.zero_grad(set_to_none=True)
    context = StepContext(
        model=model,
        optimizer=_NO_UPDATE,
        prepare=already_prepared,
        device=clips.device,
        autocast=autocast,
    )
    batch = {"inputs": {CLIPS: clips}, "label": labels, "skipped": []}
    forward_backward(context, batch, clips=len(labels))
    grads = {
        name: p.grad.detach().float().clone()
        for name, p in model.named_parameters()
        if p.grad is not None
    }
    model.zero_grad(set_to_none=True)
    return grads


def wrong_gradient(
    reference: Mapping[str, torch.Tensor],
    candidate: Mapping[str, torch.Tensor],
    *,
    factor: float = NORM_FACTOR,
) -> str | None:
    """Why `candidate`'s gradients are not `reference`'s (fp32's), naming the first wrong
    parameter in model order, or None when they agree as bf16 rounding allows (module
    docstring). A parameter with a gradient in one and none in the other is wrong too."""
    norms = {name: float(g.norm()) for name, g in reference.items()}
    finite = [n for n in norms.values() if math.isfinite(n)]
    floor = FLOOR_SHARE * statistics.median(finite) if finite else 0.0
    for name in reference:
        got = candidate.get(name)
        if got is None:
            return f"{name} has no gradient (fp32's norm {norms[name]:.3g})"
        expected = norms[name]
        if not math.isfinite(expected):
            continue  # fp32 itself is not finite here: nothing to compare against
        norm = float(got.norm())
        if not bool(torch.isfinite(got).all()):
            return f"{name}'s gradient is not finite (fp32's norm {expected:.3g})"
        if norm > factor * max(expected, floor) or (expected > floor and norm * factor < expected):
            return f"{name}'s gradient norm is {norm:.3g} against fp32's {expected:.3g}"
    extra = sorted(set(candidate) - set(reference))
    return f"{extra[0]} has a gradient where fp32 has none" if extra else None
