"""Weights of one trained video model for another: cross-modality transfer and fine-tuning.

Cong et al. (AAVG, §V) start the optical-flow stream from the trained RGB stream rather than
from ImageNet: "for the input layer, we populate the filter weights for each channel with the
mean of the weights of the 3 RGB channels" (TSN's cross-modality initialisation, Wang et al.
2016 §3.2); everything else is the RGB stream's. The same transfer fine-tunes a run on another
class list (a fresh classifier), and inflates a 2D (TSN/TSM) run into an I3D trunk.

Pure: state dicts in, a state dict and a `TransferReport` out; reading runs is
`vidscale.train.init_from`'s business.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from torch import Tensor

from vidscale.models.nonlocal_block import NON_LOCAL_KEY
from vidscale.models.pretrained import InflateInit, cross_modality_weight, inflate_weight

# Each `ResNetTrunk`'s first conv, under the model's name for its trunk: `trunk.` (TSN, TSM,
# I3D), `slow.` and `fast.` (SlowFast's two pathways), none (a bare torchvision-style ResNet).
# Anchored, so that the blocks' own `layerN.M.conv1` never match.
STEM_CONV = re.compile(r"^(?:(?:trunk|slow|fast)\.)?conv1\.weight$")
# The classifier: `trunk.fc` (TSN, TSM, I3D), `fc` (SlowFast, a bare ResNet).
CLASSIFIER = re.compile(r"^(?:trunk\.)?fc\.(?:weight|bias)$")
# What DistributedDataParallel and torch.compile put before a wrapped model's keys.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")
# Keys named in an error message, per kind of problem (a wrong depth misses dozens).
_SHOWN = 6


@dataclass(frozen=True)
class TransferReport:
    """What `transfer_state_dict` did with each of the target's tensors (keys without wrapper
    prefixes): `copied` as they were, `adapted` (key -> how), or `replaced`: classifier tensors
    left at the target's fresh initialisation because the class count differs (`classes` is
    then (source, target) class counts); `new`: non-local blocks' tensors the source has no
    keys for (an I3D run loaded into I3D-NL), left at the target's initialisation. `source`
    names where the weights came from, for logs; the transfer itself leaves it empty."""

    copied: tuple[str, ...]
    adapted: dict[str, str] = field(default_factory=dict)
    replaced: tuple[str, ...] = ()
    classes: tuple[int, int] | None = None
    source: str = ""
    new: tuple[str, ...] = ()


def unwrapped_key(key: str) -> str:
    """`key` without the prefixes of DDP (`module.`) and torch.compile (`_orig_mod.`)."""
    while key.startswith(WRAPPER_PREFIXES):
        key = key.split(".", 1)[1]
    return key


def _by_plain_key(state: Mapping[str, Tensor], *, what: str) -> dict[str, str]:
    """plain key -> the key as `state` spells it."""
    keys: dict[str, str] = {}
    for key in state:
        plain = unwrapped_key(key)
        if plain in keys:
            raise ValueError(f"{what} has both {keys[plain]!r} and {key!r}")
        keys[plain] = key
    return keys


def _adapt(key: str, have: Tensor, want: Tensor, *, init: InflateInit) -> tuple[Tensor, str]:
    """`have` reshaped for `want` where a rule applies, and how ("" when none did)."""
    steps = []
    is_kernel = min(have.dim(), want.dim()) >= 4  # (O, I, [kt,] kh, kw)
    if STEM_CONV.match(key) and is_kernel and have.shape[1] != want.shape[1]:
        steps.append(
            f"cross-modality: mean over {have.shape[1]} input channels, repeated to {want.shape[1]}"
        )
        have = cross_modality_weight(have, in_channels=want.shape[1])
    if have.dim() == 4 and want.dim() == 5:
        steps.append(f"inflated 2D -> 3D ({init})")
        have = inflate_weight(have, kt=want.shape[2], init=init)
    return have, ", then ".join(steps)


def _named(kind: str, problems: list[str]) -> str:
    more = f" ... ({len(problems)} in all)" if len(problems) > _SHOWN else ""
    return f"{kind}: {', '.join(problems[:_SHOWN])}{more}"


def transfer_state_dict(
    source: Mapping[str, Tensor],
    *,
    target: Mapping[str, Tensor],
    inflate_init: InflateInit = "centre",
) -> tuple[dict[str, Tensor], TransferReport]:
    """A state dict for the model whose state dict is `target`, made of `source`'s tensors.

    Per target key (wrapper prefixes ignored on both sides; the result uses `target`'s keys):
    the same shape is copied (BatchNorm statistics included); a stem conv (`STEM_CONV`, each
    pathway's for SlowFast) with another input-channel count gets the cross-modality weight
    (AAVG §V: the mean over the source's channels, repeated to the target's: 3 -> 20 for flow,
    20 -> 3 back); a 2D kernel for a 3D one is inflated (`inflate_weight`, `inflate_init`); a
    classifier (`CLASSIFIER`) with another class count keeps the target's tensor, and so does a
    non-local block (`NON_LOCAL_KEY`) the source lacks (new blocks are identities). Anything
    else (a key on one side only, any other shape) is a `ValueError` naming the keys: a
    checkpoint of another architecture fails as a whole instead of loading half-way. Inputs are
    not modified.
    """
    have_keys = _by_plain_key(source, what="the source")
    want_keys = _by_plain_key(target, what="the target")
    new = sorted(k for k in set(want_keys) - set(have_keys) if NON_LOCAL_KEY.search(k))
    missing = sorted(set(want_keys) - set(have_keys) - set(new))
    unexpected = sorted(set(have_keys) - set(want_keys))
    transfer = _Transfer()
    # The target's own fresh tensors for blocks the source lacks (non-local: identities).
    transfer.state.update({want_keys[k]: target[want_keys[k]].detach().clone() for k in new})
    for plain, key in want_keys.items():
        if plain in have_keys:  # else reported as missing
            transfer.take(plain, key, source[have_keys[plain]], target[key], init=inflate_init)
    problems = [
        _named(kind, names)
        for kind, names in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("shape", transfer.mismatched),
        )
        if names
    ]
    if problems:
        raise ValueError("the weights are of another architecture: " + "; ".join(problems))
    report = TransferReport(
        copied=tuple(transfer.copied),
        adapted=transfer.adapted,
        replaced=tuple(transfer.replaced),
        classes=transfer.classes,
        new=tuple(new),
    )
    return transfer.state, report


@dataclass
class _Transfer:
    """The state dict being built, and what happened to each key (`TransferReport`)."""

    state: dict[str, Tensor] = field(default_factory=dict)
    copied: list[str] = field(default_factory=list)
    adapted: dict[str, str] = field(default_factory=dict)
    replaced: list[str] = field(default_factory=list)
    classes: tuple[int, int] | None = None
    mismatched: list[str] = field(default_factory=list)

    def take(
        self, plain: str, key: str, original: Tensor, want: Tensor, *, init: InflateInit
    ) -> None:
        """Put `original`, adapted to `want`'s shape where it can be, under `key`."""
        have, how = _adapt(plain, original.to(want.dtype), want, init=init)
        if have.shape == want.shape:
            self.state[key] = have
            if how:
                self.adapted[plain] = how
            else:
                self.copied.append(plain)
        elif CLASSIFIER.match(plain) and have.shape[1:] == want.shape[1:]:
            # A new class list: the target's fresh head, a copy so that the result never aliases
            # the target's own parameters.
            self.state[key] = want.detach().clone()
            self.replaced.append(plain)
            self.classes = (have.shape[0], want.shape[0])
        else:
            self.mismatched.append(
                f"{plain} (source {tuple(original.shape)}, target {tuple(want.shape)})"
            )
