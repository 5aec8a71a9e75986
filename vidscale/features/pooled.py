"""The pooled trunk feature of any registered model: its classifier replaced by the identity.

Every model ends in one linear classifier (`trunk.fc` for TSN/TSM/I3D, `fc` for SlowFast and
the image classifiers) whose input is the pooled trunk output, after a dropout that is the
identity in eval mode; what follows the classifier is a mean (TSN/TSM's consensus over frames,
an image model's over the frames of a clip) or nothing. A mean commutes with a linear map, so
with the classifier replaced by `nn.Identity` the model's own forward returns exactly the
vector the classifier would read: for 2D frame models the average over frames of the pooled
trunk output, for I3D the global-pooled volume, for SlowFast both pathways' pooled outputs
concatenated. No model is special-cased: the classifier is found as the one `nn.Linear` that
maps to the class count.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from vidscale.data.inputs import ModelInput
from vidscale.errors import InputError


def classifier_name(model: nn.Module, num_classes: int) -> str:
    """The dotted name of `model`'s classifier: its one `nn.Linear` with `num_classes` outputs.

    Raises `InputError` when there is none or more than one (the model's feature would be
    ambiguous)."""
    found = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and module.out_features == num_classes
    ]
    if len(found) != 1:
        raise InputError(
            f"{type(model).__name__}: cannot tell its classifier (linear layers with "
            f"{num_classes} outputs: {found or 'none'})"
        )
    return found[0]


def as_feature_extractor(model: nn.Module, num_classes: int) -> int:
    """Replace `model`'s classifier by `nn.Identity` in place; return the feature size (the
    classifier's input size). `model` then maps clips (N, C, T, H, W) to features (N, F)."""
    name = classifier_name(model, num_classes)
    parent_name, _, leaf = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    classifier = getattr(parent, leaf)
    assert isinstance(classifier, nn.Linear)
    setattr(parent, leaf, nn.Identity())
    return int(classifier.in_features)


@torch.inference_mode()
def view_features(
    model: nn.Module,
    views: torch.Tensor,
    *,
    model_input: ModelInput,
    views_per_forward: int,
    autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> torch.Tensor:
    """float32 features (V, F) on the CPU of one video's uint8 views (V, C, T, H, W), at most
    `views_per_forward` views through the model at once (the result does not depend on it),
    each forward pass inside `autocast` (fp32 without one: `scoring.precision`)."""
    device = next(model.parameters()).device
    parts = []
    for start in range(0, len(views), max(views_per_forward, 1)):
        chunk = views[start : start + views_per_forward].to(device)
        with autocast():
            features = model(model_input.normalize(chunk))
        parts.append(features.float().cpu())
    return torch.cat(parts)
