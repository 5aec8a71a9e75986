"""Renaming a checkpoint's tensors onto a vidscale model, shared by the `.pyth` formats.

PyTorchVideo's hub checkpoints and PySlowFast's own both keep the model under `model_state`
(PySlowFast's `utils/checkpoint.py`, `save_checkpoint`; PyTorchVideo's `models/hub/*.py` load
`checkpoint["model_state"]`), and both name the same networks' tensors by their own modules.
A format module gives a table (its key -> vidscale key); `rename_onto` checks the table against
the file and moves the tensors. `vidscale_parts` splits a vidscale key of a volume ResNet
(`VolumeClassifier`: `trunk.*`) or of `SlowFast` (`slow.*`, `fast.*`, `lateral.*`, `fc.*`)
into the pieces every such table is written from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from vidscale.errors import InputError

_SHOWN = 3  # keys named per kind of problem in an error
_PATHWAYS = {"trunk": 0, "slow": 0, "fast": 1}


@dataclass(frozen=True)
class KeyParts:
    """A vidscale key as (pathway, place, stage, block, module, param).

    `pathway` 0 is a volume ResNet's trunk or SlowFast's Slow pathway, 1 the Fast one. `place` is
    "stem" (module "conv"/"bn"), "block" (`stage` 1..4 for layer1..layer4, `block` its index;
    module "conv1".."bn3", "downsample.0" or "downsample.1"), "lateral" (`stage` 0..3, the
    fusion before res2..res5; module "conv"/"bn") or "head" (module "fc"). `param` is the
    tensor's name in its module (`weight`, `running_mean`, ...).
    """

    pathway: int
    place: str
    stage: int
    block: int
    module: str
    param: str


_STEM = re.compile(r"^(trunk|slow|fast)\.(conv|bn)1\.(\w+)$")
_BLOCK = re.compile(
    r"^(trunk|slow|fast)\.layer([1-4])\.(\d+)\.(conv[123]|bn[123]|downsample\.[01])\.(\w+)$"
)
_LATERAL = re.compile(r"^lateral\.([0-3])\.(conv|bn)\.(\w+)$")
_HEAD = re.compile(r"^(?:trunk\.)?fc\.(\w+)$")


def vidscale_parts(key: str) -> KeyParts:
    """The parts of a volume ResNet's or SlowFast's state_dict key (KeyError for any other)."""
    if m := _STEM.match(key):
        return KeyParts(_PATHWAYS[m[1]], "stem", 0, 0, m[2], m[3])
    if m := _BLOCK.match(key):
        return KeyParts(_PATHWAYS[m[1]], "block", int(m[2]), int(m[3]), m[4], m[5])
    if m := _LATERAL.match(key):
        return KeyParts(1, "lateral", int(m[1]), 0, m[2], m[3])
    if m := _HEAD.match(key):
        return KeyParts(0, "head", 0, 0, "fc", m[1])
    raise KeyError(key)


def model_state(checkpoint: Any, path: Path, *, what: str) -> dict[str, Tensor]:
    """`checkpoint["model_state"]` as named tensors; anything else is an `InputError` naming
    `path` (`what` says which framework's file was expected)."""
    state = checkpoint.get("model_state") if isinstance(checkpoint, Mapping) else None
    if not isinstance(state, Mapping) or not state:
        raise InputError(f"{path}: no model_state in the checkpoint (not a {what} .pyth)")
    odd = [k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if odd:
        raise InputError(f"{path}: model_state entry {odd[0]!r} is not a named tensor")
    return dict(state)


def _named(keys: list[str]) -> str:
    shown = ", ".join(keys[:_SHOWN])
    return shown + (f" (+{len(keys) - _SHOWN} more)" if len(keys) > _SHOWN else "")


def rename_onto(
    given: Mapping[str, Tensor],
    target: Mapping[str, Tensor],
    table: Mapping[str, str],
    *,
    what: str,
    defaults: Mapping[str, Tensor] | None = None,
) -> dict[str, Tensor]:
    """`given` renamed by `table` (given key -> `target` key) onto `target`'s keys, each tensor
    in `target`'s dtype. `defaults` fill target keys the table does not name (a file format
    that has no such tensors). Missing and unexpected keys and mismatched shapes are one
    `InputError`, "not `what` checkpoint: ..." (`what` with its article), naming the first few
    of each kind.
    """
    missing = [k for k in table if k not in given]
    unexpected = [k for k in given if k not in table]
    mismatched = [
        f"{k} {tuple(given[k].shape)} vs {tuple(target[v].shape)}"
        for k, v in table.items()
        if k in given and given[k].shape != target[v].shape
    ]
    problems = [
        f"{len(found)} {kind}: {_named(found)}"
        for kind, found in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("of another shape (checkpoint vs model)", mismatched),
        )
        if found
    ]
    if problems:
        raise InputError(f"not {what} checkpoint: " + "; ".join(problems))
    weights = {v: given[k].to(target[v].dtype) for k, v in table.items()}
    for key, value in (defaults or {}).items():
        weights.setdefault(key, value.to(target[key].dtype))
    unfilled = [k for k in target if k not in weights]
    if unfilled:  # a table that forgets a tensor is this module's fault, not the file's
        raise AssertionError(f"no source for {_named(unfilled)}")
    return {k: weights[k] for k in target}
