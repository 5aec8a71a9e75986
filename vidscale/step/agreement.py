"""What the ranks agree on after each step: one small all-reduce of its numbers, whether it was
finite everywhere (a non-finite step is skipped on every rank) and whether some rank was asked to
stop; and the gradient norm that decides finiteness, with optional clipping."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from vidscale.distributed.collectives import all_reduce_sum


@dataclass(frozen=True)
class StepAgreement:
    """One step's numbers summed over ranks."""

    loss: float  # mean over ranks of each rank's mean micro-batch loss
    hits: int
    clips: int
    finite: bool  # every rank's loss and the gradient norm were finite
    stop: bool  # some rank was asked to stop


def agree_step(
    *,
    loss: float,
    hits: int,
    clips: int,
    finite: bool,
    stop: bool,
    world_size: int,
    device: torch.device,
) -> StepAgreement:
    """The one all-reduce per step; none for `world_size` 1, even inside a process group (the
    fast-path probe and the benches time one process's step)."""
    values = torch.tensor(
        [loss if finite else 0.0, hits, clips, 0.0 if finite else 1.0, 1.0 if stop else 0.0],
        dtype=torch.float64,
        device=device,
    )
    summed = (all_reduce_sum(values) if world_size > 1 else values).tolist()
    return StepAgreement(
        loss=summed[0] / world_size,
        hits=int(summed[1]),
        clips=int(summed[2]),
        finite=summed[3] == 0,
        stop=summed[4] > 0,
    )


def gradient_norm(model: nn.Module, *, max_norm: float) -> float:
    """The global L2 norm of the gradients (after DDP's all-reduce, the same on every rank),
    clipping them to `max_norm` when it is > 0 (`optim.clip_grad_norm`)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return 0.0
    norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    value = float(norm)  # the step's one device sync for the norm
    if max_norm > 0 and math.isfinite(value):
        torch.nn.utils.clip_grads_with_norm_(grads, max_norm, norm)
    return value


# What wrappers put before a parameter's name: DDP's module, torch.compile's original module.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def first_nonfinite(model: nn.Module, *, loss: float) -> str:
    """What was first not finite on this rank in a step: "the loss", else the first parameter
    (in model order, as the unwrapped model names it) whose gradient is not, "" when nothing
    is. Read before the gradients are cleared; called only for a step that was not finite."""
    if not math.isfinite(loss):
        return "the loss"
    for name, p in model.named_parameters():
        if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
            while name.startswith(_WRAPPER_PREFIXES):
                name = name.split(".", 1)[1]
            return f"the gradient of {name}"
    return ""
