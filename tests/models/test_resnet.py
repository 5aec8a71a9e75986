"""The shared ResNet trunk: torchvision key names and sizes, specs, temporal resolutions."""

import dataclasses

import pytest
import torch

from vidscale.models.i3d import I3D_3X1X1, I3D_3X3X3
from vidscale.models.resnet import ResNet, TemporalSpec, temporal_resolutions
from vidscale.models.temporal_shift import ShiftSpec, TemporalShift

BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def _bn(name: str) -> list[str]:
    return [f"{name}.{suffix}" for suffix in BN]


def _basic(prefix: str, *, downsample: bool = False) -> list[str]:
    keys = [f"{prefix}.conv1.weight", *_bn(f"{prefix}.bn1")]
    keys += [f"{prefix}.conv2.weight", *_bn(f"{prefix}.bn2")]
    if downsample:
        keys += [f"{prefix}.downsample.0.weight", *_bn(f"{prefix}.downsample.1")]
    return keys


# torchvision.models.resnet18().state_dict().keys(), in order (torchvision cannot be imported here).
RESNET18_KEYS = [
    "conv1.weight",
    *_bn("bn1"),
    *_basic("layer1.0"),
    *_basic("layer1.1"),
    *_basic("layer2.0", downsample=True),
    *_basic("layer2.1"),
    *_basic("layer3.0", downsample=True),
    *_basic("layer3.1"),
    *_basic("layer4.0", downsample=True),
    *_basic("layer4.1"),
    "fc.weight",
    "fc.bias",
]


def test_resnet18_keys_equal_torchvision() -> None:
    assert len(RESNET18_KEYS) == 122
    for shift in (None, ShiftSpec()):
        assert list(ResNet(18, shift=shift).state_dict()) == RESNET18_KEYS
    inflated = dataclasses.replace(I3D_3X3X3)
    assert list(ResNet(18, temporal=inflated).state_dict()) == RESNET18_KEYS


def test_resnet50_bottleneck_key_names_and_shapes() -> None:
    with torch.device("meta"):
        sd = ResNet(50).state_dict()
    assert sd["layer1.0.conv3.weight"].shape == (256, 64, 1, 1)
    assert sd["layer2.0.conv2.weight"].shape == (128, 128, 3, 3)
    assert sd["layer2.0.downsample.0.weight"].shape == (512, 256, 1, 1)
    assert sd["layer4.2.bn3.running_var"].shape == (2048,)
    assert sd["fc.weight"].shape == (1000, 2048)
    assert "layer1.0.downsample.0.weight" in sd and "layer1.1.downsample.0.weight" not in sd


@pytest.mark.parametrize(
    ("depth", "params"),
    # torchvision's published parameter counts (1000 classes).
    [(18, 11_689_512), (34, 21_797_672), (50, 25_557_032), (101, 44_549_160), (152, 60_192_808)],
)
def test_parameter_counts_equal_torchvision(depth: int, params: int) -> None:
    with torch.device("meta"):
        trunk = ResNet(depth)
    assert sum(p.numel() for p in trunk.parameters()) == params


def test_image_forward_is_a_2d_resnet() -> None:
    trunk = ResNet(18, num_classes=7).eval()
    assert trunk(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_inflated_trunk_has_3d_kernels_where_the_spec_says() -> None:
    with torch.device("meta"):
        hara = ResNet(50, temporal=I3D_3X3X3)
        wang = ResNet(50, temporal=I3D_3X1X1)
    assert hara.conv1.weight.shape == (64, 3, 7, 7, 7)
    assert _kt(hara.layer3.get_submodule("1"), "conv2") == 3
    assert _kt(hara.layer3.get_submodule("1"), "conv1") == 1
    assert wang.conv1.weight.shape == (64, 3, 5, 7, 7)
    firsts = [_kt(block, "conv1") for block in wang.layer3]
    assert firsts == [3, 1, 3, 1, 3, 1]
    assert all(_kt(block, "conv2") == 1 for block in wang.blocks())


def _kt(block: torch.nn.Module, conv: str) -> int:
    """The temporal kernel size of a block's conv: dim 2 of its weight."""
    return block.get_parameter(f"{conv}.weight").shape[2]


def test_shift_every_other_block_and_placement() -> None:
    trunk = ResNet(50, shift=ShiftSpec(every=2, place="block"))
    shifted = [isinstance(b.shift, TemporalShift) for b in trunk.layer3]
    assert shifted == [True, False, True, False, True, False]
    assert all(b.shift_place == "block" for b in trunk.blocks() if b.shift is not None)


def test_shift_placement_changes_the_function() -> None:
    torch.manual_seed(0)
    residual = ResNet(18, num_classes=3, shift=ShiftSpec(place="residual")).eval()
    block = ResNet(18, num_classes=3, shift=ShiftSpec(place="block")).eval()
    plain = ResNet(18, num_classes=3).eval()
    block.load_state_dict(residual.state_dict())
    plain.load_state_dict(residual.state_dict())
    x = torch.randn(2 * 4, 3, 32, 32)
    outs = [m(x, num_frames=4) for m in (residual, block, plain)]
    assert not torch.allclose(outs[0], outs[1])
    assert not torch.allclose(outs[0], outs[2])


def test_specs_reject_temporal_ops_on_2d_layout() -> None:
    with pytest.raises(ValueError, match="frames"):
        TemporalSpec(conv1=(3, 1))
    with pytest.raises(ValueError, match="odd"):
        TemporalSpec(layout="volume", kernels=((2,), (1,), (1,), (1,)))
    with pytest.raises(ValueError, match="shift"):
        ResNet(18, temporal=I3D_3X3X3, shift=ShiftSpec())
    with pytest.raises(ValueError, match="depth"):
        ResNet(42)


def test_table2_temporal_resolutions() -> None:
    assert temporal_resolutions(I3D_3X3X3, frames=16) == {
        "data": 16, "conv1": 16, "pool1": 8, "res2": 8,
        "res3": 4, "res4": 2, "res5": 1, "global_pool": 1,
    }  # fmt: skip
    assert temporal_resolutions(I3D_3X1X1, frames=32) == {
        "data": 32, "conv1": 16, "pool1": 8, "res2": 8, "pool2": 4,
        "res3": 4, "res4": 4, "res5": 4, "global_pool": 1,
    }  # fmt: skip
    assert set(temporal_resolutions(TemporalSpec(), frames=8).values()) == {8, 1}
    assert temporal_resolutions(TemporalSpec(pool2=(3, 2)), frames=8)["res5"] == 4


@pytest.mark.parametrize(("spec", "frames"), [(I3D_3X3X3, 16), (I3D_3X1X1, 32)])
def test_resolutions_match_an_actual_forward(spec: TemporalSpec, frames: int) -> None:
    with torch.device("meta"):
        trunk = ResNet(50, temporal=spec)
        seen: dict[str, int] = {}
        for name in ("conv1", "maxpool", "layer1", "layer2", "layer3", "layer4"):
            trunk.get_submodule(name).register_forward_hook(
                lambda _m, _i, out, name=name: seen.__setitem__(name, out.shape[2])
            )
        trunk.forward_features(torch.empty(1, 3, frames, 64, 64), num_frames=frames)
    table = temporal_resolutions(spec, frames=frames)
    assert seen == {
        "conv1": table["conv1"], "maxpool": table["pool1"], "layer1": table["res2"],
        "layer2": table["res3"], "layer3": table["res4"], "layer4": table["res5"],
    }  # fmt: skip
