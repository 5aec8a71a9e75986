"""Parameter groups: weight decay on weights only, never on BatchNorm parameters or biases.

TSM paper §4 (following TSN and Goyal et al.): "We applied no weight decay on BatchNorm and
bias". A parameter with `ndim <= 1` is a BN scale/shift or a bias; those go into a group with
`weight_decay = 0` that is also flagged `EXCLUDE_KEY: True`, which LARS and LAMB read to skip the
layer-wise trust ratio (LARS, arXiv 1708.03888, and LAMB, arXiv 1904.00962, both leave these
parameters unadapted). Optimizers that do not know the flag (SGD, AdamW) keep it as an inert
group key.
"""

from __future__ import annotations

from typing import Any

from torch import nn

EXCLUDE_KEY = "exclude_from_adaptation"


def is_excluded(param_ndim: int) -> bool:
    """True for BN scales/shifts and biases: the parameters that get no decay and no adaptation."""
    return param_ndim <= 1


def split_decay_groups(model: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
    """Split the trainable parameters of `model` into a decayed and an excluded group.

    Returns up to two groups (an empty one is left out), in this order:
    `{"params": [...], "weight_decay": weight_decay, EXCLUDE_KEY: False}` for parameters with
    ndim >= 2 (conv and linear weights), and `{"params": [...], "weight_decay": 0.0,
    EXCLUDE_KEY: True}` for ndim <= 1. Parameters with `requires_grad=False` are skipped; the
    order inside each group follows `model.named_parameters()`, so it is stable across processes.
    """
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    decay: list[nn.Parameter] = []
    keep: list[nn.Parameter] = []
    for _, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (keep if is_excluded(param.ndim) else decay).append(param)
    groups: list[dict[str, Any]] = []
    if decay:
        groups.append({"params": decay, "weight_decay": weight_decay, EXCLUDE_KEY: False})
    if keep:
        groups.append({"params": keep, "weight_decay": 0.0, EXCLUDE_KEY: True})
    if not groups:
        raise ValueError("model has no trainable parameters")
    return groups
