"""`vidscale export RUN --format trunk`: an image (or TSN/TSM) run's ResNet as the video models'
`model.pretrained` file, loaded without a missing or unexpected key and with the same features.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from vidscale.cli import main
from vidscale.config import DataConfig, RunConfig, save_config
from vidscale.data.clip import ClipSpec
from vidscale.export import export
from vidscale.models.pretrained import load_pretrained
from vidscale.models.registry import ModelConfig, build_model
from vidscale.models.resnet import ResNet
from vidscale.models.tsm import FrameClassifier
from vidscale.run.checkpoint import save_checkpoint

CLASSES = ["a", "b", "c"]
SIZE = 64


def _randomise_batchnorm(model: nn.Module) -> nn.Module:
    """Trained-looking BN statistics and affines (fresh ones are the identity, under which a
    BN tensor lost in the hand-off would go unnoticed); convs keep their Kaiming init."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                assert m.running_mean is not None and m.running_var is not None
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
    return model


def make_run(root: Path, name: str, *, frames: int = 1, checkpoint: bool = True) -> Path:
    """A run directory as training leaves it: config.json, classes.txt, checkpoints/last.pt
    (weights of a seeded model with randomised BN), or without the checkpoint."""
    run = root / name
    run.mkdir(parents=True)
    spec = ClipSpec(frames=frames, crop_size=SIZE, short_side=SIZE, flip=False)
    cfg = RunConfig(
        model=ModelConfig(name=name, num_classes=len(CLASSES), frames=frames),
        data=DataConfig(root=str(root / "data"), eval_clip=spec),
    )
    save_config(cfg, run / "config.json")
    (run / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    if checkpoint:
        torch.manual_seed(0)
        model = _randomise_batchnorm(build_model(cfg.model))
        save_checkpoint({"model": model.state_dict(), "epoch": 1}, run / "checkpoints" / "last.pt")
    return run


def _run_weights(run: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(run / "checkpoints" / "last.pt", weights_only=True)[
        "model"
    ]
    return state


def _loaded(name: str, path: Path, *, num_classes: int = len(CLASSES)) -> nn.Module:
    model = build_model(ModelConfig(name=name, num_classes=num_classes, pretrained=str(path)))
    return model.double().eval()


@pytest.fixture(scope="module")
def resnet50_trunk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run, exported trunk) of a resnet50 image run."""
    root = tmp_path_factory.mktemp("r50")
    run = make_run(root, "resnet50")
    export(run, fmt="trunk", out=root / "resnet50.pth")
    return run, root / "resnet50.pth"


def test_an_image_run_exports_its_whole_resnet(tmp_path: Path) -> None:
    run = make_run(tmp_path, "resnet18")
    out = tmp_path / "out" / "resnet18.pth"
    result = export(run, fmt="trunk", out=out)
    assert result.format == "trunk" and result.max_abs_diff == 0.0
    assert "loads strictly into a torchvision-layout ResNet-18 (122 tensors)" in result.check
    saved, weights = torch.load(out, weights_only=True), _run_weights(run)
    assert list(saved) == list(weights) and all(torch.equal(saved[k], weights[k]) for k in saved)
    meta = json.loads((tmp_path / "out" / "resnet18.pth.json").read_text())
    assert (meta["format"], meta["architecture"], meta["tensors"]) == ("trunk", "resnet18", 122)
    assert (meta["classes"], meta["num_classes"], meta["in_channels"]) == (CLASSES, 3, 3)
    assert meta["temporal_shift"] is False
    assert meta["loads_into"] == ["resnet18", "tsm_resnet18", "tsn_resnet18"]
    assert not list((tmp_path / "out").glob("*.tmp"))


@pytest.mark.parametrize("name", ["tsm_resnet18", "tsn_resnet18"])
def test_a_trunk_loads_into_tsm_and_tsn_with_no_missing_or_unexpected_key(
    tmp_path: Path, name: str
) -> None:
    run = make_run(tmp_path, "resnet18")
    out = tmp_path / "resnet18.pth"
    export(run, fmt="trunk", out=out)
    source = torch.load(out, weights_only=True)
    model = build_model(ModelConfig(name=name, num_classes=7, pretrained=str(out)))
    trunk = model.get_submodule("trunk").state_dict()
    assert set(trunk) == set(source)  # the same keys, no missing or unexpected one
    assert all(torch.equal(trunk[k], source[k]) for k in source if not k.startswith("fc."))
    assert trunk["fc.weight"].shape == (7, 512) and trunk["fc.weight"].std() < 0.01  # fresh
    fresh = build_model(ModelConfig(name=name, num_classes=7)).get_submodule("trunk")
    assert isinstance(fresh, ResNet)
    assert load_pretrained(fresh, path=out) == ["fc.weight", "fc.bias"]  # only the classifier
    same_classes = build_model(ModelConfig(name=name, num_classes=3)).get_submodule("trunk")
    assert isinstance(same_classes, ResNet) and load_pretrained(same_classes, path=out) == []


def test_tsn_from_the_trunk_gives_the_image_models_logits_per_frame(tmp_path: Path) -> None:
    run = make_run(tmp_path, "resnet18")
    out = tmp_path / "resnet18.pth"
    export(run, fmt="trunk", out=out)
    image = _loaded("resnet18", out)  # the run's own weights, through the same file
    tsn = _loaded("tsn_resnet18", out)
    assert isinstance(tsn, FrameClassifier)
    torch.manual_seed(1)
    clips = torch.randn(2, 3, 4, SIZE, SIZE, dtype=torch.float64)
    frames = clips.transpose(1, 2).reshape(8, 3, SIZE, SIZE)
    with torch.no_grad():
        per_frame = tsn.frame_logits(clips)
        torch.testing.assert_close(per_frame, image(frames).view(2, 4, 3), rtol=0, atol=0)
        torch.testing.assert_close(tsn(clips), image(clips))  # consensus = mean over frames


def test_a_resnet50_trunk_loads_into_tsm_resnet50(resnet50_trunk: tuple[Path, Path]) -> None:
    run, out = resnet50_trunk
    source = torch.load(out, weights_only=True)
    assert len(source) == 320 and source["layer4.2.conv3.weight"].shape == (2048, 512, 1, 1)
    weights = _run_weights(run)
    assert all(torch.equal(source[k], weights[k]) for k in weights)
    trunk = ResNet(50, num_classes=400)  # the TSM builder's trunk, as `model.pretrained` gets it
    assert load_pretrained(trunk, path=out) == ["fc.weight", "fc.bias"]
    tsm = build_model(ModelConfig(name="tsm_resnet50", num_classes=400, pretrained=str(out)))
    loaded = tsm.get_submodule("trunk").state_dict()
    assert all(torch.equal(loaded[k], source[k]) for k in source if not k.startswith("fc."))


@pytest.mark.parametrize(("name", "frames"), [("i3d_resnet50_3x3x3", 4), ("i3d_resnet50_3x1x1", 8)])
def test_inflated_into_i3d_a_static_clip_gives_the_2d_logits(
    resnet50_trunk: tuple[Path, Path], name: str, frames: int
) -> None:
    _, out = resnet50_trunk
    image = _loaded("resnet50", out)
    i3d = _loaded(name, out)  # the same class count: the fc is the file's too
    torch.manual_seed(2)
    frame = torch.randn(2, 3, SIZE, SIZE, dtype=torch.float64)
    static = frame.unsqueeze(2).expand(-1, -1, frames, -1, -1).contiguous()
    with torch.no_grad():
        expected = image(frame)
        torch.testing.assert_close(i3d(static), expected, rtol=1e-9, atol=1e-9)
    assert expected.abs().max() > 1e-3  # not a degenerate all-zero comparison


@pytest.mark.parametrize(("name", "shift"), [("tsn_resnet18", False), ("tsm_resnet18", True)])
def test_a_video_run_exports_its_2d_trunk(tmp_path: Path, name: str, shift: bool) -> None:
    run = make_run(tmp_path, name, frames=4)
    out = tmp_path / "trunk.pth"
    export(run, fmt="trunk", out=out)
    saved = torch.load(out, weights_only=True)
    trunk = {k.removeprefix("trunk."): v for k, v in _run_weights(run).items()}
    assert list(saved) == list(trunk) and all(torch.equal(saved[k], trunk[k]) for k in saved)
    assert json.loads(out.with_name("trunk.pth.json").read_text())["temporal_shift"] is shift
    if shift:
        return
    video = build_model(ModelConfig(name=name, num_classes=3))
    video.load_state_dict(_run_weights(run))
    image = _loaded("resnet18", out)  # the TSN trunk as an image classifier, fc included
    clips = torch.randn(1, 3, 4, SIZE, SIZE, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(image(clips), video.double().eval()(clips))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("alexnet_bn", "no torchvision ResNet trunk"),
        ("slowfast_resnet50_4x16", "no torchvision ResNet trunk"),
        ("i3d_resnet50_3x3x3", "inflated to 3D kernels"),
    ],
)
def test_runs_without_a_2d_resnet_are_refused_before_loading(
    tmp_path: Path, name: str, message: str
) -> None:
    run = make_run(tmp_path, name, frames=8, checkpoint=False)  # the error needs no weights
    with pytest.raises(ValueError, match=f"cannot export a trunk: .*{message}"):
        export(run, fmt="trunk", out=tmp_path / "trunk.pth")
    assert not (tmp_path / "trunk.pth").exists()


def test_cli_export_trunk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, "resnet18")
    out = tmp_path / "resnet18.pth"
    assert main(["export", str(run), "--format", "trunk", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out and out.is_file()
    alexnet = make_run(tmp_path, "alexnet_bn", checkpoint=False)
    (alexnet / "checkpoints").mkdir()
    (alexnet / "checkpoints" / "last.pt").write_bytes(b"")  # never read: refused before
    assert main(["export", str(alexnet), "--format", "trunk", "--out", str(out)]) == 2
    assert "no torchvision ResNet trunk" in capsys.readouterr().err
    assert main(["export", str(run), "--format", "trunk", "--out", str(out), "--opset", "17"]) == 2
