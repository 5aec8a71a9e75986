"""ImageNet weights for video trunks: load a torchvision ResNet state_dict from a local file.

A 2D trunk (TSN, TSM) takes the weights as they are. An inflated trunk (I3D) receives each 2D
kernel inflated along time (`inflate_weight`). A trunk with `in_channels != 3` (stacked optical
flow, two-stream) receives the cross-modality conv1 (`cross_modality_weight`). The classifier is
re-initialised when its class count differs from the checkpoint's, and non-local blocks (I3D-NL),
which an image network has none of, keep their initialisation (identities). No downloads, ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from vidscale.models.nonlocal_block import NON_LOCAL_KEY
from vidscale.models.resnet import ResNet

InflateInit = Literal["centre", "mean"]


def inflate_weight(w2d: Tensor, *, kt: int, init: InflateInit = "centre") -> Tensor:
    """2D kernel (O, I, kh, kw) -> 3D kernel (O, I, kt, kh, kw) that keeps a static clip's output.

    `"centre"` puts the 2D kernel at the centre tap and zeros elsewhere: a clip whose frames are all
    equal gives exactly the 2D features, at the clip ends too (zero temporal padding only meets
    zero taps). `"mean"` repeats the kernel kt times scaled by 1/kt (I3D, Carreira & Zisserman;
    Wang et al. §4): the same away from the clip ends, attenuated at them by the zero padding.
    """
    if w2d.dim() != 4:
        raise ValueError(f"expected a 2D conv kernel (O, I, kh, kw), got shape {tuple(w2d.shape)}")
    if init == "mean":
        return w2d.unsqueeze(2).repeat(1, 1, kt, 1, 1) / kt
    w3d = w2d.new_zeros(w2d.shape[0], w2d.shape[1], kt, *w2d.shape[2:])
    w3d[:, :, kt // 2] = w2d
    return w3d


def cross_modality_weight(w_rgb: Tensor, *, in_channels: int) -> Tensor:
    """Cross-modality init (TSN, Wang et al. 2016 §3.2): the RGB conv1 kernel averaged over its
    input channels and repeated to `in_channels` (e.g. 20 = 10 stacked (x, y) flow fields)."""
    return w_rgb.mean(dim=1, keepdim=True).repeat_interleave(in_channels, dim=1)


def adapt_state_dict(
    source: Mapping[str, Tensor],
    *,
    target: Mapping[str, Tensor],
    init: InflateInit = "centre",
) -> tuple[dict[str, Tensor], list[str]]:
    """Source (torchvision 2D ResNet) tensors reshaped for the target trunk's state_dict.

    Returns the new state_dict and the keys kept from the target because the source's shape
    cannot apply (only `fc.*`, when the class counts differ). Any other mismatch is an error, so a
    checkpoint of the wrong depth fails loudly instead of loading half-way.
    """
    missing = sorted(set(target) - set(source))
    unexpected = sorted(set(source) - set(target))
    if missing or unexpected:
        raise KeyError(
            f"not a matching ResNet state_dict: missing {missing}, unexpected {unexpected}"
        )
    adapted: dict[str, Tensor] = {}
    kept: list[str] = []
    for key, want in target.items():
        have = source[key].to(want.dtype)
        if key == "conv1.weight" and have.shape[1] != want.shape[1]:
            have = cross_modality_weight(have, in_channels=want.shape[1])
        if want.dim() == 5 and have.dim() == 4:
            have = inflate_weight(have, kt=want.shape[2], init=init)
        if have.shape != want.shape:
            if not key.startswith("fc."):
                raise ValueError(
                    f"{key}: checkpoint shape {tuple(have.shape)} != {tuple(want.shape)}"
                )
            kept.append(key)
            have = want
        adapted[key] = have
    return adapted, kept


def load_pretrained(trunk: ResNet, *, path: str | Path, init: InflateInit = "centre") -> list[str]:
    """Load a torchvision-format ResNet state_dict file into `trunk`; returns the keys left at
    their fresh initialisation (the classifier when the class count differs, then the non-local
    blocks' keys)."""
    source = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(source, Mapping):
        raise ValueError(
            f"{path}: expected a state_dict (a mapping of tensors), got {type(source)}"
        )
    own = trunk.state_dict()
    fresh = {key: tensor for key, tensor in own.items() if NON_LOCAL_KEY.search(key)}
    resnet = {key: tensor for key, tensor in own.items() if key not in fresh}
    adapted, kept = adapt_state_dict(source, target=resnet, init=init)
    trunk.load_state_dict({**adapted, **fresh})
    return kept + list(fresh)
