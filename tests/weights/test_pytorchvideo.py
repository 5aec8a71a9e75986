"""`vidscale import-weights --format pytorchvideo`: PyTorchVideo's own models give the same logits.

The proof (`test_logits_equal_pytorchvideos`, slow, needs the peer environment of conftest.py):
PyTorchVideo 0.1.5 builds the hub's `slowfast_r50`, `slow_r50` and `i3d_r50` (and, for
SlowFast 4x16, its builder `create_slowfast` with a 5x1x1 lateral at stride 8), each with
its head pool sized to the test clip, with random weights and BN statistics and
saves it as the hub publishes a checkpoint (`model_state`); vidscale imports the file into a
run, loads the run as `vidscale predict` does, and both run the same random clip in float64
eval mode: the logits agree to 1e-10 relative. `test_one_swapped_key_is_caught` swaps two
tensors of the same shape in that file, for each of the four models: the import succeeds and
the logits differ, so the proof is sensitive to every key's place.

The other tests need no peer: they import random checkpoints written with the key table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tests.test_predict import write_clip
from tests.weights.conftest import PTV_CLASSES
from tests.weights.test_mmaction2 import run_cli
from vidscale.errors import InputError
from vidscale.models.registry import ModelConfig, build_model, list_models
from vidscale.predict import load_run, predict
from vidscale.weights.pytorchvideo import SOURCES, check_model, vidscale_to_pytorchvideo

RTOL = 1e-10


def write_ptv_checkpoint(path: Path, model: str, num_classes: int, seed: int = 0) -> Path:
    """A random `model` saved as the hub publishes one: its keys renamed, under model_state."""
    torch.manual_seed(seed)
    state = build_model(ModelConfig(name=model, num_classes=num_classes)).state_dict()
    renamed = {vidscale_to_pytorchvideo(k, model=model): v for k, v in state.items()}
    torch.save({"model_state": renamed, "epoch": 0}, path)
    return path


def import_cli(
    capsys: pytest.CaptureFixture[str], src: Path, model: str, out: Path, *extra: str
) -> tuple[int, str, str]:
    return run_cli(
        capsys, "import-weights", str(src), "--format", "pytorchvideo", "--model", model,
        "--out", str(out), *extra,
    )  # fmt: skip


def logits_of(run: Path, clip: torch.Tensor) -> torch.Tensor:
    model = load_run(run).model.double()
    with torch.no_grad():
        return model(clip)


def relative_diff(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours - theirs).abs().max() / theirs.abs().max())


# -- without the peer ----------------------------------------------------------------------------


def test_every_other_model_is_refused_with_a_reason() -> None:
    for name in sorted(set(list_models()) - set(SOURCES)):
        with pytest.raises(InputError, match=rf"--model {name}: not importable from pytorchvideo"):
            check_model(name)
    with pytest.raises(InputError, match="scale the softmax affinities"):
        check_model("i3d_nl_resnet50_ref")


def test_a_file_without_model_state_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "mm.pth"
    torch.save({"state_dict": {"w": torch.zeros(1)}}, src)
    code, _, err = import_cli(capsys, src, "slowfast_resnet50_8x8", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1
    assert f"{src}: no model_state in the checkpoint (not a PyTorchVideo hub .pyth)" in err
    src.write_bytes(b"not a torch file")
    code, _, err = import_cli(capsys, src, "slowfast_resnet50_8x8", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and "not a readable checkpoint" in err


@pytest.mark.slow
def test_missing_keys_and_class_counts_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_ptv_checkpoint(tmp_path / "sf.pyth", "slowfast_resnet50_8x8", 5)
    ckpt = torch.load(src, weights_only=True)
    gone = "blocks.2.multipathway_fusion.conv_fast_to_slow.weight"
    del ckpt["model_state"][gone]
    torch.save(ckpt, tmp_path / "broken.pyth")
    code, _, err = import_cli(
        capsys, tmp_path / "broken.pyth", "slowfast_resnet50_8x8", tmp_path / "a"
    )
    assert code == 2 and err.count("\n") == 1
    assert f"not a PyTorchVideo slowfast_r50 checkpoint: 1 missing: {gone}" in err
    (tmp_path / "classes.txt").write_text("a\nb\nc\n")
    code, _, err = import_cli(
        capsys,
        src,
        "slowfast_resnet50_8x8",
        tmp_path / "b",
        "--classes",
        str(tmp_path / "classes.txt"),
    )
    assert code == 2 and "3 classes, but the checkpoint's classifier has 5" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.slow
def test_an_imported_run_predicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_ptv_checkpoint(tmp_path / "sf.pyth", "slowfast_resnet50_8x8", 5)
    run = tmp_path / "run"
    code, out, _ = import_cli(capsys, src, "slowfast_resnet50_8x8", run, "--json")
    assert code == 0 and json.loads(out)["num_classes"] == 5
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["data"]["eval_clip"]["frames"] == 32 and cfg["data"]["eval_clip"]["crop_size"] == 256
    video = write_clip(tmp_path / "clip.mp4", frames=12)
    top = predict(video, run=run, topk=5, num_clips=1, num_crops=1)
    assert sorted(name for name, _ in top) == [f"class_{i}" for i in range(5)]
    assert sum(p for _, p in top) == pytest.approx(1.0, abs=1e-5)


# -- against PyTorchVideo itself (the peer environment) ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SOURCES))
def test_logits_equal_pytorchvideos(
    name: str, pytorchvideo_outputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = import_cli(capsys, pytorchvideo_outputs / f"{name}.pyth", name, tmp_path / "run")
    assert code == 0, err
    clip = torch.load(pytorchvideo_outputs / "clip_float64.pt", weights_only=True)
    ours = logits_of(tmp_path / "run", clip)
    theirs = torch.load(pytorchvideo_outputs / f"{name}_logits.pt", weights_only=True)
    assert ours.shape == theirs.shape == (2, PTV_CLASSES)
    diff = relative_diff(ours, theirs)
    print(f"pytorchvideo {name}: max |logit diff| / max |logit| = {diff:.3g}", file=sys.stderr)
    assert diff <= RTOL


# Where res3 is in each model's state: create_slowfast's Slow pathway (the hub's 8x8 and the
# 4x16), create_resnet's blocks.2, or blocks.3 behind i3d_r50's pool after res2.
RES3 = {
    "slowfast_resnet50_8x8": "blocks.2.multipathway_blocks.0",
    "slowfast_resnet50_4x16": "blocks.2.multipathway_blocks.0",
    "slow_resnet50_8x8": "blocks.2",
    "i3d_resnet50_8x8": "blocks.3",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RES3))
def test_one_swapped_key_is_caught(
    name: str, pytorchvideo_outputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two res3 blocks' conv_b (same shapes) exchanged: the import fits, the logits do not."""
    ckpt = torch.load(pytorchvideo_outputs / f"{name}.pyth", weights_only=True)
    state = ckpt["model_state"]
    a, b = (f"{RES3[name]}.res_blocks.{i}.branch2.conv_b.weight" for i in (1, 2))
    assert state[a].shape == state[b].shape and not torch.equal(state[a], state[b])
    state[a], state[b] = state[b], state[a]
    torch.save(ckpt, tmp_path / "swapped.pyth")
    code, _, err = import_cli(capsys, tmp_path / "swapped.pyth", name, tmp_path / "run")
    assert code == 0, err
    clip = torch.load(pytorchvideo_outputs / "clip_float64.pt", weights_only=True)
    theirs = torch.load(pytorchvideo_outputs / f"{name}_logits.pt", weights_only=True)
    assert relative_diff(logits_of(tmp_path / "run", clip), theirs) > 1e-3
