"""Caffe2 `.pkl` files as PySlowFast's model zoo has them: Python 2 pickles (`python2_pickle.py`
writes them as Python 2.7's cPickle does). `vidscale.weights.c2_pickle` decodes one into the
arrays written, as PySlowFast's `pickle.load(f, encoding="latin1")` does, and a whole model's
file imports into a run with exactly those weights. A file re-saved by Python 3 reads the same."""

from __future__ import annotations

import io
import pickle
import pickletools
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.weights.python2_pickle import python2_pickle
from tests.weights.test_pyslowfast import import_cli
from vidscale.models.registry import ModelConfig, build_model
from vidscale.predict import load_run
from vidscale.weights.c2_pickle import read_blobs
from vidscale.weights.pyslowfast import vidscale_to_caffe2

# Opcodes of Python 3 only (protocol 3 and later), and Python 3's spellings at protocol 2.
PYTHON3_ONLY = {op.name for op in pickletools.opcodes if op.proto > 2}
PYTHON3_STR = {"BINUNICODE", "SHORT_BINUNICODE"}


def zoo_blobs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Blobs as a zoo file holds them: float32 weights and BN vectors by Caffe2 name, each
    weight's momentum, the solver's `lr` and int64 `model_iter`; enough blobs (1,003) for
    cPickle to write two SETITEMS batches and memo indices past 255."""
    blobs = {
        "conv1_w": rng.standard_normal((8, 3, 1, 7, 7), dtype=np.float32),
        "res_conv1_bn_s": rng.random(8, dtype=np.float32),
        "res_conv1_bn_riv": rng.random(8, dtype=np.float32),
        "pred_b": rng.standard_normal(5, dtype=np.float32),
    }
    for i in range(495):
        blobs[f"res2_{i}_branch2a_w"] = rng.standard_normal((4, 2, 1, 1, 1), dtype=np.float32)
        blobs[f"res2_{i}_branch2a_w_momentum"] = np.zeros((4, 2, 1, 1, 1), np.float32)
    blobs["lr"] = np.array([0.1], np.float32)
    blobs["model_iter"] = np.array([196000], np.int64)
    return blobs


def ops_of(stream: bytes) -> list[tuple[str, object]]:
    return [(op.name, arg) for op, arg, _ in pickletools.genops(stream)]


def test_the_stream_is_python_2s() -> None:
    """Protocol 2 with Python 2's opcodes only: names and buffers as byte strings (short and
    long), NumPy's classes by GLOBAL under `numpy.core`; `pickletools.dis` checks its stack and
    memo. Python 3's own protocol-2 pickle of the same dict is not this stream."""
    blobs = zoo_blobs(np.random.default_rng(0))
    stream = python2_pickle(blobs)
    pickletools.dis(stream, out=io.StringIO())
    ops = ops_of(stream)
    names = {name for name, _ in ops}
    assert ops[0] == ("PROTO", 2) and not names & (PYTHON3_ONLY | PYTHON3_STR)
    assert {"SHORT_BINSTRING", "BINSTRING", "SETITEMS", "SETITEM", "LONG_BINPUT"} <= names
    assert ("GLOBAL", "numpy.core.multiarray _reconstruct") in ops
    strings = [arg for name, arg in ops if name == "SHORT_BINSTRING"]
    assert set(blobs) <= set(strings)  # every name a Python 2 str
    python3 = {name for name, _ in ops_of(pickle.dumps({"blobs": blobs}, protocol=2))}
    assert "BINUNICODE" in python3 and "SHORT_BINSTRING" not in python3


def python3_pickle(blobs: Mapping[str, np.ndarray]) -> bytes:
    """The same dict re-saved by Python 3 at protocol 2 (buffers as `_codecs.encode`)."""
    return pickle.dumps({"blobs": dict(blobs)}, protocol=2)


@pytest.mark.parametrize("write", [python2_pickle, python3_pickle])
def test_the_blobs_decode_to_the_arrays_written(
    write: Callable[[Mapping[str, np.ndarray]], bytes], tmp_path: Path
) -> None:
    blobs = zoo_blobs(np.random.default_rng(1))
    src = tmp_path / "zoo.pkl"
    src.write_bytes(write(blobs))
    with open(src, "rb") as f:  # as PySlowFast's checkpoint.load_checkpoint reads it
        theirs = pickle.load(f, encoding="latin1")["blobs"]
    ours = read_blobs(src)
    assert list(ours) == list(theirs) == list(blobs)
    for name, array in blobs.items():
        assert isinstance(theirs[name], np.ndarray) and theirs[name].dtype == array.dtype
        assert np.array_equal(theirs[name], array)
        assert torch.equal(ours[name], torch.from_numpy(array)), name


@pytest.mark.slow
def test_a_python2_zoo_file_imports_into_exactly_its_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A whole I3D 8x8 as a Python 2 zoo file (Caffe2 names, momentum, `lr`, `model_iter`):
    the imported run's every tensor is the one written; BN counts, which Caffe2 has not, 0."""
    name = "i3d_resnet50_8x8"
    torch.manual_seed(0)
    state = build_model(ModelConfig(name=name, num_classes=5)).state_dict()
    blobs = {}
    for key, value in state.items():
        blob = vidscale_to_caffe2(key)
        if blob is not None:
            blobs[blob] = value.numpy()
            if blob.endswith("_w"):
                blobs[blob + "_momentum"] = np.zeros_like(value.numpy())
    blobs["lr"] = np.array([0.0001], np.float32)
    blobs["model_iter"] = np.array([196000], np.int64)
    src = tmp_path / "I3D_8x8_R50.pkl"
    src.write_bytes(python2_pickle(blobs))
    code, _, err = import_cli(capsys, src, name, tmp_path / "run")
    assert code == 0, err
    imported = load_run(tmp_path / "run").model.state_dict()
    assert list(imported) == list(state)
    for key, value in state.items():
        if key.endswith("num_batches_tracked"):
            assert int(imported[key]) == 0
        else:
            assert torch.equal(imported[key], value), key
