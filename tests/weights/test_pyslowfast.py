"""`vidscale import-weights --format pyslowfast`: PySlowFast's files give PyTorchVideo's logits.

PySlowFast is not on PyPI; PyTorchVideo's `create_slowfast` builds the same network (module
for module, `vidscale.weights.pytorchvideo`), and its `create_resnet` (hub `slow_r50`,
`i3d_r50`) PySlowFast's one-pathway `ResNet` for `MODEL.ARCH` slow and i3d. So the proof
(`test_logits_equal_pyslowfasts`, slow, needs the PyTorchVideo peer of conftest.py) takes
PyTorchVideo's random SlowFast 8x8 and 4x16, Slow 8x8 and I3D 8x8, writes their tensors
under PySlowFast's names, as its `save_checkpoint` writes a `.pyth`, and under the Caffe2
names of its zoo's `.pkl` files (a Python 2 pickle, as those are), both renamed by
`ptv_to_pyslowfast` and `pyslowfast_to_caffe2` below: tables written here from PySlowFast's code
(`slowfast/models/video_model_builder.py`, `resnet_helper.py`, `stem_helper.py`, `head_helper.py`,
`slowfast/utils/c2_model_loading.py`), not from vidscale's. vidscale imports each file and its logits
must equal PyTorchVideo's forward (1e-10 relative, float64). `test_one_swapped_key_is_caught`
exchanges two tensors of one shape in either file, for every model: the import succeeds and
the logits no longer agree, so the proof can fail.
"""

from __future__ import annotations

import pickle
import re
import sys
from pathlib import Path

import pytest
import torch

from tests.weights.python2_pickle import python2_pickle
from tests.weights.test_mmaction2 import run_cli
from tests.weights.test_pytorchvideo import logits_of, relative_diff
from vidscale.errors import InputError
from vidscale.models.registry import list_models
from vidscale.weights.pyslowfast import SOURCES, check_model

RTOL = 1e-10
MODELS = (
    "slowfast_resnet50_8x8",
    "slowfast_resnet50_4x16",
    "slow_resnet50_8x8",
    "i3d_resnet50_8x8",
)
# res2..res4's block counts in a ResNet-50: a stage's last block names the Caffe2 lateral.
LAST_BLOCK = {2: 2, 3: 3, 4: 5}

# Inside a bottleneck: PyTorchVideo's `ResBlock`/`BottleneckBlock` -> PySlowFast's `ResBlock`
# (`branch1`, `branch1_bn`) and `BottleneckTransform` (`a`, `a_bn`, ... `c_bn`).
_BRANCHES = (
    (r"\.branch1_conv\.", ".branch1."),
    (r"\.branch1_norm\.", ".branch1_bn."),
    (r"\.branch2\.conv_([abc])\.", r".branch2.\1."),
    (r"\.branch2\.norm_([abc])\.", r".branch2.\1_bn."),
)
_PTV_TO_PYSLOWFAST = (
    (r"^blocks\.0\.multipathway_blocks\.(\d)\.conv\.", r"s1.pathway\1_stem.conv."),
    (r"^blocks\.0\.multipathway_blocks\.(\d)\.norm\.", r"s1.pathway\1_stem.bn."),
    (r"^blocks\.(\d)\.multipathway_fusion\.conv_fast_to_slow\.", r"s<\1>_fuse.conv_f2s."),
    (r"^blocks\.(\d)\.multipathway_fusion\.norm\.", r"s<\1>_fuse.bn."),
    (r"^blocks\.(\d)\.multipathway_blocks\.(\d)\.res_blocks\.(\d+)\.", r"s<\1>.pathway\2_res\3."),
    *_BRANCHES,
    (r"^blocks\.6\.proj\.", "head.projection."),
)
# `create_resnet` (slow_r50, i3d_r50) is PySlowFast's one-pathway `ResNet`: stem `s1.pathway0_stem`,
# stages `s2..s5` of blocks `pathway0_res{i}`, `head.projection`. i3d_r50's 2x1x1 pool after res2
# is its block 2 (PySlowFast's parameterless `pathway0_pool`), so res3..res5 are blocks 3..5.
_PTV_RESNET_TO_PYSLOWFAST = (
    (r"^blocks\.0\.conv\.", "s1.pathway0_stem.conv."),
    (r"^blocks\.0\.norm\.", "s1.pathway0_stem.bn."),
    (r"^blocks\.(\d)\.res_blocks\.(\d+)\.", r"s<\1>.pathway0_res\2."),
    *_BRANCHES,
    (r"^blocks\.\d\.proj\.", "head.projection."),
)
POOL_AFTER_RES2 = ("i3d_resnet50_8x8",)


def ptv_to_pyslowfast(key: str, model: str) -> str:
    """PyTorchVideo's key of `model` -> PySlowFast's: block i of `create_slowfast` (0 the stems
    and first fusion, 1..4 res2..res5) or of `create_resnet` (0 the stem, then res2..res5) is
    PySlowFast's stage `s{i+1}`, or `s{i}` behind i3d_r50's pool (block 2)."""
    multi = model.startswith("slowfast_")
    for pattern, replacement in _PTV_TO_PYSLOWFAST if multi else _PTV_RESNET_TO_PYSLOWFAST:
        key = re.sub(pattern, replacement, key)
    pooled = model in POOL_AFTER_RES2
    return re.sub(r"s<(\d)>", lambda m: f"s{int(m[1]) + 1 - (pooled and int(m[1]) > 2)}", key)


_BN_BLOB = {"weight": "s", "bias": "b", "running_mean": "rm", "running_var": "riv"}


def pyslowfast_to_caffe2(key: str) -> str | None:
    """PySlowFast's key -> the Caffe2 blob `c2_model_loading.py` converts to it (None: a
    `num_batches_tracked`, which Caffe2 has not)."""
    prefix, param = key.rsplit(".", 1)
    if param == "num_batches_tracked":
        return None
    if m := re.match(r"^s1\.pathway(\d)_stem\.(conv|bn)$", prefix):
        t = "t_" if m[1] == "1" else ""
        return f"{t}conv1_w" if m[2] == "conv" else f"{t}res_conv1_bn_{_BN_BLOB[param]}"
    if m := re.match(r"^s(\d)_fuse\.(conv_f2s|bn)$", prefix):
        stage = int(m[1])
        source = "t_pool1" if stage == 1 else f"t_res{stage}_{LAST_BLOCK[stage]}_branch2c_bn"
        return f"{source}_subsample_w" if m[2] == "conv_f2s" else (
            f"{source}_subsample_bn_{_BN_BLOB[param]}"
        )  # fmt: skip
    if m := re.match(r"^s(\d)\.pathway(\d)_res(\d+)\.branch(1|2\.([abc]))(_bn)?$", prefix):
        t = "t_" if m[2] == "1" else ""
        branch = "1" if m[4] == "1" else f"2{m[5]}"
        if m[6]:
            return f"{t}res{m[1]}_{m[3]}_branch{branch}_bn_{_BN_BLOB[param]}"
        return f"{t}res{m[1]}_{m[3]}_branch{branch}_w"
    if prefix == "head.projection":
        return "pred_w" if param == "weight" else "pred_b"
    raise KeyError(key)


def import_cli(
    capsys: pytest.CaptureFixture[str], src: Path, model: str, out: Path
) -> tuple[int, str, str]:
    return run_cli(
        capsys, "import-weights", str(src), "--format", "pyslowfast", "--model", model,
        "--out", str(out),
    )  # fmt: skip


def pyslowfast_state(ptv_file: Path, model: str) -> dict[str, torch.Tensor]:
    state = torch.load(ptv_file, weights_only=True)["model_state"]
    return {ptv_to_pyslowfast(k, model): v for k, v in state.items()}


def write_pyth(path: Path, state: dict[str, torch.Tensor]) -> Path:
    """As PySlowFast's `save_checkpoint` writes one (its cfg is a YAML dump, a string)."""
    torch.save(
        {"epoch": 196, "model_state": state, "optimizer_state": {}, "cfg": "MODEL: {}"}, path
    )
    return path


def write_pkl(path: Path, state: dict[str, torch.Tensor], drop: str = "") -> Path:
    """As the zoo's Caffe2 files are: NumPy blobs by Caffe2 name, with the optimizer's too, in
    a Python 2 pickle (`python2_pickle.py`)."""
    blobs = {}
    for key, value in state.items():
        name = pyslowfast_to_caffe2(key)
        if name is not None and name != drop:
            blobs[name] = value.numpy()
            if name.endswith("_w"):
                blobs[name + "_momentum"] = (0 * value).numpy()
    blobs["lr"] = torch.tensor([0.1]).numpy()
    blobs["model_iter"] = torch.tensor([1000]).numpy()
    path.write_bytes(python2_pickle(blobs))
    return path


# -- without the peer ----------------------------------------------------------------------------


def test_every_other_model_is_refused_with_a_reason() -> None:
    for name in sorted(set(list_models()) - set(SOURCES)):
        with pytest.raises(InputError, match=rf"--model {name}: not importable from pyslowfast"):
            check_model(name)
    with pytest.raises(InputError, match="scale the softmax affinities"):
        check_model("i3d_nl_resnet50_ref")


def test_a_pickle_without_blobs_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "x.pkl"
    src.write_bytes(pickle.dumps({"model": 1}))
    code, _, err = import_cli(capsys, src, "slowfast_resnet50_8x8", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1
    assert f"{src}: no blobs in the pickle (not a Caffe2 checkpoint)" in err
    src.write_bytes(b"garbage")
    code, _, err = import_cli(capsys, src, "slowfast_resnet50_8x8", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and "not a readable Caffe2 pickle" in err


# -- against PyTorchVideo's model (the peer environment) -----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".pyth", ".pkl"])
@pytest.mark.parametrize("name", MODELS)
def test_logits_equal_pyslowfasts(
    name: str,
    suffix: str,
    pytorchvideo_outputs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = pyslowfast_state(pytorchvideo_outputs / f"{name}.pyth", name)
    write = write_pyth if suffix == ".pyth" else write_pkl
    src = write(tmp_path / f"{name}{suffix}", state)
    code, _, err = import_cli(capsys, src, name, tmp_path / "run")
    assert code == 0, err
    clip = torch.load(pytorchvideo_outputs / "clip_float64.pt", weights_only=True)
    theirs = torch.load(pytorchvideo_outputs / f"{name}_logits.pt", weights_only=True)
    diff = relative_diff(logits_of(tmp_path / "run", clip), theirs)
    print(
        f"pyslowfast {name}{suffix}: max |logit diff| / max |logit| = {diff:.3g}", file=sys.stderr
    )
    assert diff <= RTOL


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".pyth", ".pkl"])
@pytest.mark.parametrize("name", MODELS)
def test_one_swapped_key_is_caught(
    name: str,
    suffix: str,
    pytorchvideo_outputs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two res3 blocks' conv b (same shapes) exchanged, in the `.pyth` (PySlowFast's names) or
    the `.pkl` (Caffe2's: `res3_1_branch2b_w` and `res3_2_branch2b_w`): the import fits, the
    logits do not."""
    state = pyslowfast_state(pytorchvideo_outputs / f"{name}.pyth", name)
    a, b = (f"s3.pathway0_res{i}.branch2.b.weight" for i in (1, 2))
    assert state[a].shape == state[b].shape and not torch.equal(state[a], state[b])
    state[a], state[b] = state[b], state[a]
    write = write_pyth if suffix == ".pyth" else write_pkl
    src = write(tmp_path / f"swapped{suffix}", state)
    code, _, err = import_cli(capsys, src, name, tmp_path / "run")
    assert code == 0, err
    clip = torch.load(pytorchvideo_outputs / "clip_float64.pt", weights_only=True)
    theirs = torch.load(pytorchvideo_outputs / f"{name}_logits.pt", weights_only=True)
    assert relative_diff(logits_of(tmp_path / "run", clip), theirs) > 1e-3


@pytest.mark.slow
def test_one_missing_caffe2_blob_is_named(
    pytorchvideo_outputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "slowfast_resnet50_8x8"
    state = pyslowfast_state(pytorchvideo_outputs / f"{name}.pyth", name)
    gone = "t_res3_3_branch2c_bn_subsample_w"
    src = write_pkl(tmp_path / "broken.pkl", state, drop=gone)
    code, _, err = import_cli(capsys, src, name, tmp_path / "run")
    assert code == 2 and err.count("\n") == 1
    assert f"not a PySlowFast Caffe2 .pkl checkpoint: 1 missing: {gone}" in err
