"""ImageNet weights: loading a torchvision-format file, inflation, cross-modality init."""

from pathlib import Path

import pytest
import torch

from vidscale.models.i3d import I3D_3X1X1, I3D_3X3X3
from vidscale.models.pretrained import (
    adapt_state_dict,
    cross_modality_weight,
    inflate_weight,
    load_pretrained,
)
from vidscale.models.registry import ModelConfig, build_model
from vidscale.models.resnet import ResNet, TemporalSpec


def _imagenet_like(depth: int, *, seed: int = 0) -> ResNet:
    """A 2D ResNet with random weights and random BN statistics, as a checkpoint stand-in."""
    torch.manual_seed(seed)
    trunk = ResNet(depth)
    for m in trunk.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            assert m.running_mean is not None and m.running_var is not None
            m.running_mean.normal_(0.0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0.0, 0.1)
    return trunk.eval()


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("weights") / "resnet18.pth"
    torch.save(_imagenet_like(18).state_dict(), path)
    return path


def test_pretrained_tsm_loads_trunk_and_reinitialises_fc(resnet18_file: Path) -> None:
    source = torch.load(resnet18_file, weights_only=True)
    model = build_model(
        ModelConfig(name="tsm_resnet18", num_classes=5, pretrained=str(resnet18_file))
    )
    loaded = model.trunk.state_dict()  # type: ignore[union-attr]
    for key, value in source.items():
        if not key.startswith("fc."):
            assert torch.equal(loaded[key], value), key
    assert loaded["fc.weight"].shape == (5, 512)
    assert loaded["fc.weight"].std() < 0.01  # the fresh N(0, 0.001) head, not the file's
    assert torch.equal(loaded["fc.bias"], torch.zeros(5))


def test_pretrained_with_same_class_count_keeps_fc(resnet18_file: Path) -> None:
    source = torch.load(resnet18_file, weights_only=True)
    trunk = ResNet(18)
    assert load_pretrained(trunk, path=resnet18_file) == []
    assert torch.equal(trunk.fc.weight, source["fc.weight"])
    assert load_pretrained(ResNet(18, num_classes=10), path=resnet18_file) == [
        "fc.weight",
        "fc.bias",
    ]


def test_wrong_depth_fails_loudly(resnet18_file: Path) -> None:
    with pytest.raises(KeyError, match="missing"):
        load_pretrained(ResNet(34), path=resnet18_file)


def test_inflate_weight_centre_and_mean() -> None:
    w = torch.randn(4, 2, 3, 3)
    centre = inflate_weight(w, kt=3)
    assert centre.shape == (4, 2, 3, 3, 3)
    assert torch.equal(centre[:, :, 1], w) and not centre[:, :, [0, 2]].any()
    mean = inflate_weight(w, kt=3, init="mean")
    assert torch.allclose(mean.sum(2), w)


def test_mean_inflation_keeps_static_clip_away_from_clip_ends() -> None:
    conv2d = torch.nn.Conv2d(2, 4, 3, padding=1, bias=False)
    conv3d = torch.nn.Conv3d(2, 4, (3, 3, 3), padding=1, bias=False)
    conv3d.weight.data = inflate_weight(conv2d.weight.data, kt=3, init="mean")
    image = torch.randn(1, 2, 5, 5)
    out = conv3d(image.unsqueeze(2).expand(-1, -1, 4, -1, -1))
    for t in (1, 2):
        assert torch.allclose(out[:, :, t], conv2d(image), atol=1e-6)
    assert not torch.allclose(out[:, :, 0], conv2d(image), atol=1e-3)


@pytest.mark.parametrize(("spec", "frames"), [(I3D_3X3X3, 4), (I3D_3X1X1, 8)])
def test_inflated_trunk_reproduces_2d_on_a_static_clip(spec: TemporalSpec, frames: int) -> None:
    """Centre inflation: a clip of identical frames gives the 2D network's output (eval mode).

    float64, so that the 1e-5 tolerance tests the inflation rather than float32 rounding of
    logits in the hundreds (random weights and BN statistics)."""
    trunk2d = _imagenet_like(50).double()
    trunk3d = ResNet(50, temporal=spec).double()
    adapted, kept = adapt_state_dict(trunk2d.state_dict(), target=trunk3d.state_dict())
    assert kept == []
    trunk3d.load_state_dict(adapted)
    trunk3d.eval()
    image = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    clip = image.unsqueeze(2).expand(-1, -1, frames, -1, -1).contiguous()
    with torch.no_grad():
        expected = trunk2d(image)
        got = trunk3d(clip, num_frames=frames)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5)


def test_cross_modality_conv1_for_stacked_flow(resnet18_file: Path) -> None:
    rgb = torch.load(resnet18_file, weights_only=True)["conv1.weight"]
    w = cross_modality_weight(rgb, in_channels=20)
    assert w.shape == (64, 20, 7, 7)
    assert torch.allclose(w[:, 7], rgb.mean(1))
    model = build_model(
        ModelConfig(
            name="tsn_resnet18", in_channels=20, num_classes=3, pretrained=str(resnet18_file)
        )
    ).eval()
    assert torch.equal(model.get_parameter("trunk.conv1.weight"), w)
    assert model(torch.randn(1, 20, 2, 32, 32)).shape == (1, 3)


def test_pretrained_i3d_is_inflated_from_2d(resnet18_file: Path, tmp_path: Path) -> None:
    path = tmp_path / "resnet50.pth"
    torch.save(_imagenet_like(50).state_dict(), path)
    model = build_model(ModelConfig(name="i3d_resnet50_3x1x1", num_classes=4, pretrained=str(path)))
    w = model.get_parameter("trunk.conv1.weight")
    assert w.shape == (64, 3, 5, 7, 7)
    assert torch.equal(w[:, :, 2], torch.load(path, weights_only=True)["conv1.weight"])
