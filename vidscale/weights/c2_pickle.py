"""Reading a Caffe2 checkpoint (`.pkl`): its NumPy blobs, never its code.

The Caffe2 checkpoints of PySlowFast's model zoo (and of the non-local paper's code before it)
are Python 2 pickles of `{"blobs": {name: numpy.ndarray}, ...}`; PySlowFast reads them with
`pickle.load(f, encoding="latin1")` (`utils/checkpoint.py`). `_ArraysOnly` rebuilds NumPy
arrays, dtypes and bytes (NumPy's own reconstruct functions, `codecs.encode`) and replaces
every other class or function the file names by `pth.Opaque`, so nothing it names is imported
or run.
"""

from __future__ import annotations

import codecs
import importlib
import pickle
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vidscale.errors import InputError
from vidscale.run.checkpoint import first_line
from vidscale.weights.pth import Opaque


def _multiarray() -> Any:
    """NumPy's `multiarray` module (`numpy._core` from NumPy 2, `numpy.core` before)."""
    try:
        return importlib.import_module("numpy._core.multiarray")
    except ImportError:  # NumPy 1
        return importlib.import_module("numpy.core.multiarray")


_MULTIARRAY = _multiarray()
_ALLOWED = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("collections", "OrderedDict"): OrderedDict,
    # Python 3's protocol-2 pickles spell bytes (an array's buffer) as encode(text, "latin1").
    ("_codecs", "encode"): codecs.encode,
}
_ARRAY_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray")


class _ArraysOnly(pickle.Unpickler):
    """NumPy arrays, dtypes and scalars as themselves; any other global as `Opaque`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module in _ARRAY_MODULES and name in ("_reconstruct", "scalar"):
            return getattr(_MULTIARRAY, name)
        return Opaque


def read_blobs(path: Path) -> dict[str, Tensor]:
    """The numeric arrays of the file's `blobs` as tensors, by name; a file that is no such
    pickle is an `InputError` naming it. Non-numeric blobs (none in a model) are left out."""
    try:
        with open(path, "rb") as f:
            checkpoint = _ArraysOnly(f, encoding="latin1").load()
    except Exception as err:  # damage surfaces as whatever the bytes trigger
        raise InputError(f"{path}: not a readable Caffe2 pickle ({first_line(err)})") from err
    blobs = checkpoint.get("blobs") if isinstance(checkpoint, Mapping) else None
    if not isinstance(blobs, Mapping) or not blobs:
        raise InputError(f"{path}: no blobs in the pickle (not a Caffe2 checkpoint)")
    return {
        str(name): torch.from_numpy(np.array(value))
        for name, value in blobs.items()
        if isinstance(value, np.ndarray) and value.dtype.kind in "fiub"
    }
