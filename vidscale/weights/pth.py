"""Reading another framework's `.pth` checkpoint: its tensors, never its code.

`torch.load(weights_only=True)` reads a checkpoint of tensors and plain containers. A training
framework's file often holds more: MMEngine's `meta` and `message_hub` carry its own classes and
NumPy values, which the safe loader refuses. Such a file is read again by `_TensorsOnly`, an
unpickler that rebuilds tensors (torch's own rebuild functions and storages) and replaces every
other class or function the file names by `Opaque`, an inert placeholder, so nothing the file
names is imported or run. Only the state dict's tensors are used.
"""

from __future__ import annotations

import pickle
import types
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vidscale.errors import InputError
from vidscale.run.checkpoint import first_line


class Opaque:
    """What a checkpoint's non-tensor object becomes: nothing (its arguments and state dropped)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs

    def __setstate__(self, state: Any) -> None:
        del state


_ALLOWED = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch", "Size"): torch.Size,
    ("torch._tensor", "_rebuild_from_type_v2"): torch._tensor._rebuild_from_type_v2,
}


class _TensorsOnly(pickle.Unpickler):
    """Tensors, dtypes and ordered dicts as themselves; any other global as `Opaque`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module == "torch._utils" and name.startswith("_rebuild_"):
            return getattr(torch._utils, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        return Opaque


# `torch.load(pickle_module=...)` takes a module-like object with `Unpickler` and `load`.
_TENSORS_ONLY = types.SimpleNamespace(
    Unpickler=_TensorsOnly, load=lambda f, **kw: _TensorsOnly(f, **kw).load(), __name__="pickle"
)


def load_pth(path: Path) -> Any:
    """The object in `path`: by `torch.load(weights_only=True)`, else tensors only (above).

    A file that is neither is an `InputError` naming it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        pass  # classes beyond tensors: read again, replacing them
    except Exception as err:  # damage surfaces as whatever the bytes trigger
        raise InputError(f"{path}: not a readable checkpoint ({first_line(err)})") from err
    try:
        return torch.load(
            path,
            map_location="cpu",
            weights_only=False,
            pickle_module=_TENSORS_ONLY,  # type: ignore[arg-type]
        )
    except Exception as err:
        raise InputError(f"{path}: not a readable checkpoint ({first_line(err)})") from err


def state_dict_of(checkpoint: Any, path: Path) -> dict[str, Tensor]:
    """The checkpoint's `state_dict` (or the checkpoint itself when it is one): its tensors by
    key; anything else is an `InputError` naming `path`."""
    state = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, Mapping) else None
    if not isinstance(state, Mapping) or not state:
        raise InputError(f"{path}: no state_dict in the checkpoint")
    odd = [k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if odd:
        raise InputError(f"{path}: state_dict entry {odd[0]!r} is not a named tensor")
    return dict(state)
