"""`vidscale import-weights --format mmaction2`: MMAction2's own models give the same logits.

The proof (`test_logits_equal_mmaction2s`, slow, needs the peer environment of conftest.py):
MMAction2 1.2 builds each covered model from the config file in its package, with random
weights and BN statistics, and saves it as MMAction2 saves a checkpoint; vidscale imports the
file into a run, loads the run as `vidscale predict` does, and both run the same random clip
in float64 eval mode. The logits agree to 1e-10 relative, and bitwise (`torch.equal`) for
every model of `BITWISE`: all but TSN, whose head averages features before its fc where
vidscale averages logits after it, a rounding apart. `test_preprocessing_equals_mmaction2s` runs a uint8 clip through the config's
`ActionDataPreprocessor` and through vidscale's RGB normalisation: bitwise equal.
`test_one_mismatched_key_fails_the_proof` shows the proof can fail, for every model: two
tensors of one shape exchanged in MMAction2's file import, and the logits no longer agree.

The other tests need no peer: they import random checkpoints written with the key table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_predict import write_clip
from vidscale.cli import main
from vidscale.data.inputs import ModelInput
from vidscale.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize
from vidscale.errors import InputError
from vidscale.export import export
from vidscale.models.registry import ModelConfig, build_model, list_models
from vidscale.predict import load_run, predict
from vidscale.run.ref import checkpoint_path
from vidscale.train.init_from import describe, initialise_from
from vidscale.weights.mmaction2 import SOURCES, check_model, key_table, vidscale_to_mmaction2
from vidscale.weights.pth import load_pth

PEER_SCRIPT = Path(__file__).with_name("mmaction2_peer.py")
RECOGNITION = "recognition/{}/{}.py"
# MMAction2's ActionDataPreprocessor in every covered config (RGB, 0..255 scale).
MMACTION2_MEAN = (123.675, 116.28, 103.53)
MMACTION2_STD = (58.395, 57.12, 57.375)
CLASSES = 7
RTOL = 1e-10


def layout(model: str) -> str:
    """How MMAction2's recognizer takes the clip: "2d" (frames as images) or "3d"."""
    return "2d" if model.startswith(("tsn_", "tsm_")) else "3d"


def clip_frames(model: str) -> int:
    """Frames of the proofs' 16-frame clip the model reads: MMAction2's 2D recognizers shift
    across their config's `num_segments` (8) whatever the clip; the 3D ones take all 16."""
    return 8 if layout(model) == "2d" else 16


def _config(model: str) -> str:
    zoo = SOURCES[model].configs[0]
    return RECOGNITION.format(zoo.split("_", 1)[0], zoo)


def write_mmaction2_checkpoint(path: Path, model: str, num_classes: int, seed: int = 0) -> Path:
    """A random `model` saved as MMAction2 saves one: its keys renamed, under "state_dict"."""
    torch.manual_seed(seed)
    state = build_model(ModelConfig(name=model, num_classes=num_classes)).state_dict()
    renamed = {vidscale_to_mmaction2(k, model=model): v for k, v in state.items()}
    torch.save({"state_dict": renamed, "meta": {"epoch": 1, "seed": seed}}, path)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- without the peer ----------------------------------------------------------------------------


def test_rgb_normalisation_is_mmaction2s() -> None:
    """MMAction2 normalises RGB with ImageNet's statistics on the 0..255 scale: vidscale's RGB
    input uses the same numbers in the same (RGB) order, so no conversion is needed."""
    assert (IMAGENET_MEAN, IMAGENET_STD) == (MMACTION2_MEAN, MMACTION2_STD)
    clip = torch.randint(0, 256, (1, 3, 2, 4, 4), dtype=torch.uint8)
    mean = torch.tensor(MMACTION2_MEAN).view(1, 3, 1, 1, 1)
    std = torch.tensor(MMACTION2_STD).view(1, 3, 1, 1, 1)
    assert torch.equal(ModelInput("rgb", 3).normalize(clip), (clip.float() - mean) / std)


def test_every_other_model_is_refused_with_a_reason() -> None:
    for name in sorted(set(list_models()) - set(SOURCES)):
        with pytest.raises(InputError, match=rf"--model {name}: not importable from mmaction2 \("):
            check_model(name)


def test_a_refused_model_ends_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "any.pth"
    src.write_bytes(b"")
    code, _, err = run_cli(
        capsys, "import-weights", str(src), "--format", "mmaction2", "--model", "online_tsm_resnet50",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert "its shift is causal" in err and not (tmp_path / "run").exists()


@pytest.mark.slow  # builds every covered model, SlowFast's included
def test_tsm_keys_carry_the_shift_wrapper() -> None:
    """ResNetTSM wraps conv1 of every block (`conv1.conv.net`); TSN's, I3D's and SlowFast's
    do not."""
    with torch.device("meta"):
        for name in SOURCES:
            table = key_table(build_model(ModelConfig(name=name)).state_dict(), model=name)
            wrapped = [k for k in table if ".conv1.conv.net." in k]
            assert len(wrapped) == (16 if name == "tsm_resnet50" else 0)
            head = "fc.weight" if name.startswith("slowfast_") else "trunk.fc.weight"
            assert table["cls_head.fc_cls.weight"] == head


FIRED: list[str] = []


class Tripwire:
    """A class a framework might pickle in a checkpoint's meta; restoring it trips `FIRED`."""

    def __setstate__(self, state: object) -> None:
        FIRED.append("set")


def test_framework_objects_are_not_constructed(tmp_path: Path) -> None:
    """A checkpoint with other classes than tensors (MMEngine's message hub, ...) is read for
    its tensors only: the classes are stand-ins, never imported or built."""
    path = tmp_path / "ckpt.pth"
    weights = {"w": torch.arange(3.0)}
    hub = Tripwire()
    hub.__dict__["history"] = [1.0, 2.0]  # a state to restore: pickle calls __setstate__
    torch.save({"state_dict": weights, "meta": {"hub": hub}}, path)
    loaded = load_pth(path)
    assert torch.equal(loaded["state_dict"]["w"], weights["w"]) and FIRED == []
    assert type(loaded["meta"]["hub"]).__name__ == "Opaque"
    torch.load(path, weights_only=False)  # what an unrestricted load would have done
    assert FIRED == ["set"]


# -- random checkpoints: errors and an imported run at work --------------------------------------


@pytest.mark.slow
def test_one_renamed_key_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_mmaction2_checkpoint(tmp_path / "tsm.pth", "tsm_resnet50", 5)
    ckpt = torch.load(src, weights_only=True)
    key = "backbone.layer2.0.conv1.conv.net.weight"
    ckpt["state_dict"]["backbone.layer2.0.conv1.conv.weight"] = ckpt["state_dict"].pop(key)
    torch.save(ckpt, src)
    code, _, err = run_cli(
        capsys, "import-weights", str(src), "--format", "mmaction2", "--model", "tsm_resnet50",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and err.startswith("vidscale: error: ")
    assert f"1 missing: {key}" in err
    assert "1 unexpected: backbone.layer2.0.conv1.conv.weight" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_an_i3d_checkpoint_is_not_a_tsm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_mmaction2_checkpoint(tmp_path / "i3d.pth", "i3d_resnet50_ref", 5)
    code, _, err = run_cli(
        capsys, "import-weights", str(src), "--format", "mmaction2", "--model", "tsm_resnet50",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert "not an MMAction2 tsm_resnet50 checkpoint: 16 missing: " in err
    assert "backbone.layer1.0.conv1.conv.net.weight" in err and "16 unexpected" in err
    assert "of another shape (checkpoint vs model): backbone.conv1.conv.weight " in err
    assert "(64, 3, 5, 7, 7) vs (64, 3, 7, 7)" in err


@pytest.mark.slow
def test_the_class_list_must_fit_the_classifier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_mmaction2_checkpoint(tmp_path / "tsn.pth", "tsn_resnet50", 5)
    (tmp_path / "classes.txt").write_text("a\nb\nc\n")
    code, _, err = run_cli(
        capsys, "import-weights", str(src), "--format", "mmaction2", "--model", "tsn_resnet50",
        "--classes", str(tmp_path / "classes.txt"), "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert "3 classes, but the checkpoint's classifier has 5" in err


@pytest.mark.slow
def test_an_imported_run_predicts_exports_and_initialises(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tiny import (5 classes): `predict` on a short video, a TorchScript export, and
    `model.init_from` of a run on 3 classes (trunk copied, classifier replaced)."""
    src = write_mmaction2_checkpoint(tmp_path / "tsm.pth", "tsm_resnet50", 5)
    run = tmp_path / "run"
    code, out, _ = run_cli(
        capsys, "import-weights", str(src), "--format", "mmaction2", "--model", "tsm_resnet50",
        "--num-classes", "5", "--out", str(run), "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["tensors"] == 320
    assert (run / "classes.txt").read_text().split() == [f"class_{i}" for i in range(5)]
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["name"] == "tsm_resnet50" and cfg["model"]["num_classes"] == 5
    assert checkpoint_path(run, "epoch_0000").is_file()  # what `vidscale eval` scores

    video = write_clip(tmp_path / "clip.mp4", frames=12)
    top = predict(video, run=run, topk=5, num_clips=1, num_crops=1)
    assert sorted(name for name, _ in top) == [f"class_{i}" for i in range(5)]
    assert sum(p for _, p in top) == pytest.approx(1.0, abs=1e-5)

    result = export(run, fmt="torchscript", out=tmp_path / "model.pt")
    assert result.max_abs_diff is not None and result.max_abs_diff < 1e-4

    fresh = build_model(ModelConfig(name="tsm_resnet50", num_classes=3))
    report = initialise_from(fresh, run)
    imported = load_run(run).model.state_dict()
    trunk = [k for k in imported if not k.startswith("trunk.fc.")]
    assert all(torch.equal(fresh.state_dict()[k], imported[k]) for k in trunk)
    assert "trunk.fc.* replaced (5 -> 3 classes)" in describe(report)


# -- against MMAction2 itself (the peer environment) --------------------------------------------


@pytest.fixture(scope="module")
def peer_outputs(mmaction2_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MMAction2's checkpoints and float64 logits of every covered model, and its normalised
    clip (`mmaction2_peer.py`), for one random clip of 2 x 16 frames of 64 x 64 (SlowFast's
    Slow pathway: 2 frames at 4x16, 4 at 8x8)."""
    work = tmp_path_factory.mktemp("mmaction2_peer")
    clip = torch.randint(
        0, 256, (2, 3, 16, 64, 64), generator=torch.Generator().manual_seed(0), dtype=torch.uint8
    )
    torch.save(clip, work / "clip_uint8.pt")
    torch.save(normalize(clip, dtype=torch.float64), work / "clip_float64.pt")
    requests = [
        {
            "name": name,
            "config": _config(name),
            "num_classes": CLASSES,
            "seed": seed,
            "layout": layout(name),
            "frames": clip_frames(name),
        }
        for seed, name in enumerate(SOURCES)
    ]
    (work / "request.json").write_text(json.dumps(requests))
    done = subprocess.run(
        [str(mmaction2_python), str(PEER_SCRIPT), str(work)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return work


def imported_logits(
    src: Path, name: str, peer: Path, run: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 logits of `src` imported as a run, and MMAction2's."""
    code, _, err = run_cli(
        capsys, "import-weights", str(src), "--format", "mmaction2", "--model", name,
        "--out", str(run),
    )  # fmt: skip
    assert code == 0, err
    model = load_run(run).model.double()
    clip = torch.load(peer / "clip_float64.pt", weights_only=True)[:, :, : clip_frames(name)]
    with torch.no_grad():
        ours = model(clip)
    theirs = torch.load(peer / f"{name}_logits.pt", weights_only=True)
    assert ours.shape == theirs.shape == (2, CLASSES)
    return ours, theirs


def relative_diff(
    src: Path, name: str, peer: Path, run: Path, capsys: pytest.CaptureFixture[str]
) -> float:
    """max |logit diff| / max |logit| of MMAction2's logits and those of `src` imported."""
    ours, theirs = imported_logits(src, name, peer, run, capsys)
    return float((ours - theirs).abs().max() / theirs.abs().max())


# The models whose float64 logits are MMAction2's bit for bit: the same operations in the same
# order. TSN's head averages the segments' features before its fc, vidscale's model averages
# the logits after it: equal in exact arithmetic, a rounding apart in float64.
BITWISE = tuple(name for name in SOURCES if name != "tsn_resnet50")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SOURCES))
def test_logits_equal_mmaction2s(
    name: str, peer_outputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = peer_outputs / f"{name}.pth"
    ours, theirs = imported_logits(src, name, peer_outputs, tmp_path / "run", capsys)
    diff = float((ours - theirs).abs().max() / theirs.abs().max())
    print(f"{name}: max |logit diff| / max |logit| = {diff:.3g}", file=sys.stderr)
    assert diff <= RTOL
    if name in BITWISE:
        assert torch.equal(ours, theirs)


def swapped_pair(name: str) -> tuple[str, str]:
    """Two tensors of one shape in `name`'s MMAction2 checkpoint: res3's blocks 1 and 2's conv1
    (SlowFast: in the Fast pathway, the smaller part of its features) or conv2 (the others;
    their conv1 kernels differ by block in I3D's inflation)."""
    if name.startswith("slowfast_"):
        return (
            "backbone.fast_path.layer3.1.conv1.conv.weight",
            "backbone.fast_path.layer3.2.conv1.conv.weight",
        )
    return ("backbone.layer3.1.conv2.conv.weight", "backbone.layer3.2.conv2.conv.weight")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SOURCES))
def test_one_mismatched_key_fails_the_proof(
    name: str, peer_outputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The proof can fail: MMAction2's checkpoint with two tensors of one shape exchanged
    imports (names and shapes fit) but its logits are no longer MMAction2's."""
    ckpt = torch.load(peer_outputs / f"{name}.pth", weights_only=True)
    state = ckpt["state_dict"]
    a, b = swapped_pair(name)
    assert state[a].shape == state[b].shape and not torch.equal(state[a], state[b])
    state[a], state[b] = state[b], state[a]
    torch.save(ckpt, tmp_path / "swapped.pth")
    diff = relative_diff(tmp_path / "swapped.pth", name, peer_outputs, tmp_path / "run", capsys)
    print(f"{name}, {a} swapped: {diff:.3g}", file=sys.stderr)
    assert diff > 1e-3


@pytest.mark.slow
def test_preprocessing_equals_mmaction2s(peer_outputs: Path) -> None:
    clip = torch.load(peer_outputs / "clip_uint8.pt", weights_only=True)
    theirs = torch.load(peer_outputs / "normalized.pt", weights_only=True)
    assert torch.equal(ModelInput("rgb", 3).normalize(clip), theirs)
