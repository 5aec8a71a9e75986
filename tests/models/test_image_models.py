"""Image classifiers: exact costs, torchvision's ResNet keys, images as one-frame clips."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from torch import nn

from vidscale.bench.compute.flops import model_info
from vidscale.cli import main
from vidscale.models.image import ALEXNET_CONVS, AlexNetBN, ImageResNet
from vidscale.models.registry import (
    ModelConfig,
    build_model,
    default_frames,
    default_num_classes,
    list_models,
)

IMAGE_MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "alexnet_bn")


@pytest.mark.parametrize(
    ("name", "params", "macs"),
    [
        ("resnet18", 11_689_512, 1_814_073_344),
        ("resnet34", 21_797_672, 3_663_761_408),
        ("resnet50", 25_557_032, 4_089_184_256),
        ("resnet101", 44_549_160, 7_801_405_440),
        ("alexnet_bn", 61_119_528, 714_188_480),
    ],
)
def test_parameters_and_macs_per_224_image(name: str, params: int, macs: int) -> None:
    info = model_info(ModelConfig(name=name, num_classes=1000), frames=1, size=224)
    assert (info.params, info.macs) == (params, macs)


def _bn_output_elements(model: nn.Module, size: int) -> int:
    """Elements BatchNorm layers output for one image (shapes only: the model is on meta)."""
    total = 0

    def count(_: nn.Module, __: object, out: torch.Tensor) -> None:
        nonlocal total
        total += out.numel()

    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.register_forward_hook(count)
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, size, size, device="meta"))
    return total


@pytest.mark.parametrize(("name", "quoted"), [("resnet18", 1.82), ("resnet50", 4.11)])
def test_the_quoted_gmacs_also_count_batchnorm(name: str, quoted: float) -> None:
    """1.82 G and 4.11 G are the conv/fc MACs plus 2 operations per BN output element."""
    cfg = ModelConfig(name=name, num_classes=1000)
    with torch.device("meta"):
        model = build_model(cfg)
    macs = model_info(cfg, frames=1, size=224).macs
    assert round((macs + 2 * _bn_output_elements(model, 224)) / 1e9, 2) == quoted


def test_alexnet_bn_counts_by_hand() -> None:
    """torchvision's AlexNet formula, plus 2 per BN channel; its MACs layer by layer."""
    convs = [(3, 64, 11), (64, 192, 5), (192, 384, 3), (384, 256, 3), (256, 256, 3)]
    fcs = [(256 * 6 * 6, 4096), (4096, 4096), (4096, 1000)]
    torchvision_params = sum(o * i * k * k + o for i, o, k in convs) + sum(
        i * o + o for i, o in fcs
    )
    assert torchvision_params == 61_100_840
    bn_channels = sum(o for _, o, _ in convs) + 4096 + 4096
    info = model_info(ModelConfig(name="alexnet_bn", num_classes=1000), frames=1, size=224)
    assert info.params == torchvision_params + 2 * bn_channels
    sides = [55, 27, 13, 13, 13]  # conv outputs at 224: (224 + 4 - 11) // 4 + 1, pools 3/2
    conv_macs = sum(s * s * o * i * k * k for s, (i, o, k) in zip(sides, convs, strict=True))
    assert info.macs == conv_macs + sum(i * o for i, o in fcs)


def _torchvision_resnet_shapes(depth: int, num_classes: int = 1000) -> dict[str, tuple[int, ...]]:
    """torchvision's ResNet state_dict, key by key in its order, written from the architecture:
    BasicBlock (18/34) or Bottleneck v1.5 (50/101), downsample on each stage's first block
    where the shape changes."""
    bottleneck = depth >= 50
    counts = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}[depth]
    shapes: dict[str, tuple[int, ...]] = {}

    def bn(prefix: str, c: int) -> None:
        for name in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{prefix}.{name}"] = (c,)
        shapes[f"{prefix}.num_batches_tracked"] = ()

    shapes["conv1.weight"] = (64, 3, 7, 7)
    bn("bn1", 64)
    cin = 64
    for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), counts, strict=True), 1):
        cout = planes * 4 if bottleneck else planes
        for b in range(count):
            p = f"layer{stage}.{b}"
            if bottleneck:
                convs = [(planes, cin, 1), (planes, planes, 3), (cout, planes, 1)]
            else:
                convs = [(planes, cin, 3), (planes, planes, 3)]
            for j, (o, i, k) in enumerate(convs, 1):
                shapes[f"{p}.conv{j}.weight"] = (o, i, k, k)
                bn(f"{p}.bn{j}", o)
            if b == 0 and (stage > 1 or cin != cout):
                shapes[f"{p}.downsample.0.weight"] = (cout, cin, 1, 1)
                bn(f"{p}.downsample.1", cout)
            cin = cout
    shapes["fc.weight"] = (num_classes, cin)
    shapes["fc.bias"] = (num_classes,)
    return shapes


@pytest.mark.parametrize(("name", "depth", "keys"), [("resnet18", 18, 122), ("resnet50", 50, 320)])
def test_resnet_state_dict_is_torchvisions(name: str, depth: int, keys: int) -> None:
    with torch.device("meta"):
        state = build_model(ModelConfig(name=name, num_classes=1000)).state_dict()
    got = [(k, tuple(v.shape)) for k, v in state.items()]
    assert got == list(_torchvision_resnet_shapes(depth).items())
    assert len(got) == keys


def test_resnet50_sample_of_torchvision_keys() -> None:
    """A few keys and shapes as torchvision's resnet50 has them, written out by hand."""
    with torch.device("meta"):
        state = build_model(ModelConfig(name="resnet50", num_classes=1000)).state_dict()
    expected = {
        "conv1.weight": (64, 3, 7, 7),
        "bn1.running_var": (64,),
        "layer1.0.conv1.weight": (64, 64, 1, 1),
        "layer1.0.downsample.0.weight": (256, 64, 1, 1),
        "layer2.0.conv2.weight": (128, 128, 3, 3),
        "layer3.5.bn3.weight": (1024,),
        "layer4.0.downsample.1.running_mean": (2048,),
        "layer4.2.conv3.weight": (2048, 512, 1, 1),
        "fc.weight": (1000, 2048),
        "fc.bias": (1000,),
    }
    assert {k: tuple(state[k].shape) for k in expected} == expected
    assert "layer1.0.downsample.1.num_batches_tracked" in state
    assert "layer1.1.downsample.0.weight" not in state and "layer4.3.conv1.weight" not in state


@pytest.mark.parametrize("name", ["resnet18", "alexnet_bn"])
def test_an_image_is_a_one_frame_clip(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, num_classes=5)).eval()
    images = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        from_images = model(images)
        from_clips = model(images.unsqueeze(2))
    assert from_images.shape == (2, 5)
    assert torch.equal(from_images, from_clips)


@pytest.mark.parametrize("name", ["resnet18", "alexnet_bn"])
def test_frames_of_a_clip_average_their_logits(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, num_classes=5)).double().eval()
    clips = torch.randn(2, 3, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        per_frame = torch.stack([model(clips[:, :, t]) for t in range(3)], dim=1)
        torch.testing.assert_close(model(clips), per_frame.mean(dim=1))


def test_config_knobs_reach_the_image_models() -> None:
    cfg = ModelConfig(name="resnet18", num_classes=7, in_channels=20, dropout=0.3)
    resnet = build_model(cfg)
    alexnet = build_model(replace(cfg, name="alexnet_bn"))
    for model in (resnet, alexnet):
        conv1, fc, dropout = (model.get_submodule(n) for n in ("conv1", "fc", "dropout"))
        assert isinstance(conv1, nn.Conv2d) and conv1.weight.shape[1] == 20
        assert isinstance(fc, nn.Linear) and fc.out_features == 7
        assert isinstance(dropout, nn.Dropout) and dropout.p == 0.3
        assert model.eval()(torch.randn(2, 20, 1, 64, 64)).shape == (2, 7)
    assert isinstance(resnet, ImageResNet) and isinstance(alexnet, AlexNetBN)


def test_image_models_reject_temporal_knobs_and_small_alexnet_inputs() -> None:
    for name in ("resnet50", "alexnet_bn"):
        with pytest.raises(ValueError, match="image classifier"):
            build_model(ModelConfig(name=name, temporal_pool=True))
        with pytest.raises(ValueError, match="image classifier"):
            build_model(ModelConfig(name=name, shift_div=4))
    with pytest.raises(ValueError, match="torchvision ResNet"):
        build_model(ModelConfig(name="alexnet_bn", pretrained="resnet50.pth"))
    with pytest.raises(ValueError, match="at least 63x63"):
        build_model(ModelConfig(name="alexnet_bn")).eval()(torch.zeros(1, 3, 1, 62, 62))


def test_alexnet_bn_normalises_every_conv_and_hidden_fc() -> None:
    model = AlexNetBN(num_classes=10)
    bns = [
        (n, type(m))
        for n, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
    ]
    assert bns == [(f"bn{i}", nn.BatchNorm2d) for i in range(1, 6)] + [
        ("bn6", nn.BatchNorm1d),
        ("bn7", nn.BatchNorm1d),
    ]
    widths = [o for o, *_ in ALEXNET_CONVS] + [4096, 4096]
    assert [model.get_submodule(n).num_features for n, _ in bns] == widths


def test_registry_defaults_for_image_models() -> None:
    assert set(IMAGE_MODELS) <= set(list_models())
    for name in IMAGE_MODELS:
        assert (default_frames(name), default_num_classes(name)) == (1, 1000)
    assert default_num_classes("tsm_resnet50") == 400


def test_cli_lists_and_describes_the_image_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    assert set(IMAGE_MODELS) <= set(capsys.readouterr().out.split())
    assert main(["info", "resnet50", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["params"], info["macs"], info["input_shape"]) == (
        25_557_032,
        4_089_184_256,
        [1, 3, 1, 224, 224],
    )
    assert main(["info", "alexnet_bn"]) == 0
    assert "61,119,528" in capsys.readouterr().out
