"""SlowFast-R50 (Feichtenhofer et al. 2019) on the shared trunk: cost against PySlowFast's model
zoo, pathway frame rates, lateral shapes, variable clips, and the trunk options it needs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import Tensor, nn

from vidscale.bench.compute.flops import model_info
from vidscale.models.registry import (
    ModelConfig,
    build_model,
    default_frames,
    stage_temporal_resolutions,
)
from vidscale.models.resnet import ResNet, ResNetTrunk
from vidscale.models.slowfast import (
    SLOWFAST_4X16,
    SLOWFAST_8X8,
    FastToSlow,
    SlowFast,
    SlowFastSpec,
    windowed_conv,
)

NAMES = ("slowfast_resnet50_4x16", "slowfast_resnet50_8x8")
SPECS = {"slowfast_resnet50_4x16": SLOWFAST_4X16, "slowfast_resnet50_8x8": SLOWFAST_8X8}
FC_MACS = (2048 + 256) * 400  # the classifier: 2304 features x 400 classes


def _model(spec: SlowFastSpec, *, num_classes: int = 3) -> SlowFast:
    torch.manual_seed(0)
    return SlowFast(spec, num_classes=num_classes)


@pytest.mark.parametrize(
    ("name", "params"), [("slowfast_resnet50_4x16", 34.48e6), ("slowfast_resnet50_8x8", 34.57e6)]
)
def test_parameters_match_pyslowfast(name: str, params: float) -> None:
    info = model_info(ModelConfig(name=name, num_classes=400), frames=32, size=224)
    assert info.params == pytest.approx(params, rel=0.005)
    assert default_frames(name) == 32


@pytest.mark.parametrize(
    ("name", "gmacs", "rel"),
    # PySlowFast's model zoo: 36.1 and 65.7 GFLOPs (multiply-accumulates, convs and fc, not BN)
    # per view, its test views being 32 frames x 256 x 256 crops.
    [("slowfast_resnet50_4x16", 36.1, 0.005), ("slowfast_resnet50_8x8", 65.7, 0.03)],
)
def test_macs_match_pyslowfast_at_its_256_crop(name: str, gmacs: float, rel: float) -> None:
    at_256 = model_info(ModelConfig(name=name, num_classes=400), frames=32, size=256)
    assert at_256.macs == pytest.approx(gmacs * 1e9, rel=rel)
    # At 224 every conv output is (224/256)^2 the size (no odd sizes on the way: 112, 56, 28,
    # 14, 7 vs 128, 64, 32, 16, 8); only the fc keeps its cost. 27.6 and 50.3 GMACs.
    at_224 = model_info(ModelConfig(name=name, num_classes=400), frames=32, size=224)
    assert (at_224.macs - FC_MACS) * 64 == (at_256.macs - FC_MACS) * 49
    assert at_224.macs == pytest.approx(gmacs * 1e9 * 49 / 64, rel=rel)


def test_the_two_variants_differ_only_in_the_lateral_kernel() -> None:
    # 4x16 -> 8x8: lateral kernels 5 -> 7 on 8->16, 32->64, 64->128, 128->256 channels.
    a, b = (model_info(ModelConfig(name=n), frames=32, size=224) for n in NAMES)
    assert b.params - a.params == 2 * (8 * 16 + 32 * 64 + 64 * 128 + 128 * 256)


@pytest.mark.parametrize("spec", [SLOWFAST_4X16, SLOWFAST_8X8])
def test_kernels_and_widths_follow_the_paper(spec: SlowFastSpec) -> None:
    with torch.device("meta"):
        sd = SlowFast(spec, num_classes=400).state_dict()
    assert sd["slow.conv1.weight"].shape == (64, 3, 1, 7, 7)
    assert sd["fast.conv1.weight"].shape == (8, 3, 5, 7, 7)
    # The Slow pathway's stage inputs carry the laterals: 64+16, 256+64, 512+128, 1024+256.
    for layer, cin in zip(range(1, 5), (80, 320, 640, 1280), strict=True):
        assert sd[f"slow.layer{layer}.0.conv1.weight"].shape[1] == cin
        assert sd[f"slow.layer{layer}.0.downsample.0.weight"].shape[1] == cin
        assert sd[f"slow.layer{layer}.1.conv1.weight"].shape[1] == 256 * 2 ** (layer - 1)
    # Temporal kernel 1 in res2/res3 and 3 (first conv) in res4/res5 of the Slow pathway;
    # 3 in every block of the Fast pathway; 3x3 convs and 1x1 outputs stay 2D.
    for key, w in sd.items():
        if not key.endswith("conv1.weight") or ".layer" not in f".{key}":
            continue
        pathway, stage = key.split(".")[:2]
        want = 3 if pathway == "fast" or stage in ("layer3", "layer4") else 1
        assert w.shape[2] == want, key
    assert all(
        w.shape[2] == 1 for k, w in sd.items() if k.endswith(("conv2.weight", "conv3.weight"))
    )
    for i, cin in enumerate((8, 32, 64, 128)):
        assert sd[f"lateral.{i}.conv.weight"].shape == (2 * cin, cin, spec.fusion_kernel, 1, 1)
    assert sd["fc.weight"].shape == (400, 2304)
    assert sd["fast.layer4.2.conv3.weight"].shape == (256, 64, 1, 1, 1)


@pytest.mark.parametrize(
    ("spec", "frames", "crop"), [(SLOWFAST_4X16, 8, 32), (SLOWFAST_8X8, 16, 48)]
)
def test_forward_backward_on_a_tiny_clip(spec: SlowFastSpec, frames: int, crop: int) -> None:
    torch.set_num_threads(1)
    model = _model(spec)
    logits = model(torch.randn(2, 3, frames, crop, crop))
    assert logits.shape == (2, 3)
    logits.logsumexp(dim=1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def _record_inputs(modules: dict[str, nn.Module]) -> dict[str, tuple[int, ...]]:
    seen: dict[str, tuple[int, ...]] = {}
    for key, module in modules.items():

        def hook(_m: nn.Module, args: tuple[Tensor, ...], out: Tensor, key: str = key) -> None:
            seen[f"{key}:in"], seen[f"{key}:out"] = tuple(args[0].shape), tuple(out.shape)

        module.register_forward_hook(hook)
    return seen


@pytest.mark.parametrize("spec", [SLOWFAST_4X16, SLOWFAST_8X8])
def test_slow_pathway_sees_t_over_alpha_frames_chosen_as_pyslowfast(spec: SlowFastSpec) -> None:
    model = _model(spec).eval()
    seen = _record_inputs({"slow": model.slow.conv1, "fast": model.fast.conv1})
    frames = 32
    # Frame t holds the value t, so the selected frames can be read back.
    clips = torch.arange(frames, dtype=torch.float).view(1, 1, frames, 1, 1)
    clips = clips.expand(2, 3, frames, 32, 32).contiguous()
    with torch.no_grad():
        model(clips)
    assert seen["slow:in"] == (2, 3, frames // spec.alpha, 32, 32)
    assert seen["fast:in"] == (2, 3, frames, 32, 32)
    slow, fast = model.pack_pathways(clips)
    picked = slow[0, 0, :, 0, 0].long().tolist()
    assert picked == torch.linspace(0, frames - 1, frames // spec.alpha).long().tolist()
    assert picked[0] == 0 and picked[-1] == frames - 1  # first and last frames, as PackPathway
    assert fast is clips


@pytest.mark.parametrize("spec", [SLOWFAST_4X16, SLOWFAST_8X8])
def test_lateral_shapes(spec: SlowFastSpec) -> None:
    model = _model(spec).eval()
    stages = model.slow.stages()
    seen = _record_inputs(
        {f"lateral{i}": m for i, m in enumerate(model.lateral)}
        | {f"slow{i}": stages[i] for i in range(4)}
    )
    n, frames, crop = 2, 16, 64
    with torch.no_grad():
        model(torch.randn(n, 3, frames, crop, crop))
    ts = frames // spec.alpha
    # Before res2, res3, res4, res5: fast (C, T) -> (2C, T/α), concatenated to the slow input.
    for i, (c_fast, c_slow, side) in enumerate(
        [(8, 64, 16), (32, 256, 16), (64, 512, 8), (128, 1024, 4)]
    ):
        assert seen[f"lateral{i}:in"] == (n, c_fast, frames, side, side)
        assert seen[f"lateral{i}:out"] == (n, 2 * c_fast, ts, side, side)
        # Stage i consumes slow + lateral channels (its hook sees the concatenated input).
        assert seen[f"slow{i}:in"] == (n, c_slow + 2 * c_fast, ts, side, side)


@pytest.mark.parametrize("spec", [SLOWFAST_4X16, SLOWFAST_8X8])
@pytest.mark.parametrize("frames", [32, 12, 3])
def test_the_windowed_lateral_conv_equals_the_time_strided_conv(
    spec: SlowFastSpec, frames: int
) -> None:
    torch.manual_seed(0)
    lateral = FastToSlow(8, ratio=2, kernel=spec.fusion_kernel, alpha=spec.alpha)
    x = torch.randn(2, 8, frames, 5, 6, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    windowed, strided = windowed_conv(lateral.conv, x), lateral.conv(x2)
    assert windowed.shape == strided.shape == (2, 16, -(-frames // spec.alpha), 5, 6)
    torch.testing.assert_close(windowed, strided, rtol=1e-5, atol=1e-5)
    windowed.square().sum().backward()
    strided.square().sum().backward()
    assert x.grad is not None and x2.grad is not None
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="bias-free"):
        windowed_conv(nn.Conv3d(8, 8, (3, 3, 3), stride=(2, 1, 1), padding=1), x)


# SlowFast 4x16's last lateral at 224²: oneDNN's bf16 strided conv corrupted the heap here.
_BF16_LATERAL = """
import torch
from vidscale.models.slowfast import FastToSlow
torch.manual_seed(0)
lateral = FastToSlow(128, ratio=2, kernel=5, alpha=8)
x = torch.randn(1, 128, 32, 14, 14, requires_grad=True)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(2):
        lateral(x).float().sum().backward()
print("done")
"""


@pytest.mark.slow
def test_the_bf16_lateral_conv_runs_on_cpu_where_the_strided_one_aborted() -> None:
    """In a child process: on an AMX CPU the strided bf16 conv aborted it ("munmap_chunk():
    invalid pointer") before CPU bf16 took the windowed conv."""
    done = subprocess.run(
        [sys.executable, "-c", _BF16_LATERAL], capture_output=True, text=True, timeout=300
    )
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr[-2000:]


@pytest.mark.parametrize("spec", [SLOWFAST_4X16, SLOWFAST_8X8])
def test_clip_length_and_crop_may_change_between_calls(spec: SlowFastSpec) -> None:
    torch.set_num_threads(1)
    model = _model(spec, num_classes=4).eval()
    # Multiples of α as multigrid feeds them, then a T that α does not divide and a T < α:
    # the Slow pathway gets ceil(T/α) frames, the lateral's output length.
    for frames, crop in [(8, 32), (16, 48), (12, 40), (spec.alpha // 2, 32)]:
        with torch.no_grad():
            assert model(torch.randn(1, 3, frames, crop, crop)).shape == (1, 4)
        assert model.pack_pathways(torch.zeros(1, 3, frames, 1, 1))[0].shape[2] == (
            -(-frames // spec.alpha)
        )


def test_fast_pathway_reaches_the_logits() -> None:
    # A frame the Slow pathway skips changes the output only through the Fast pathway.
    model = _model(SLOWFAST_4X16).eval()
    clips = torch.randn(1, 3, 16, 32, 32)
    other = clips.clone()
    other[:, :, 5] = torch.randn(3, 32, 32)  # slow frames are 0 and 15
    with torch.no_grad():
        assert not torch.allclose(model(clips), model(other))


def test_stage_frames_for_table2() -> None:
    stages = stage_temporal_resolutions(ModelConfig(name="slowfast_resnet50_4x16"), frames=32)
    assert stages["data"] == 32 and stages["global_pool"] == 1
    assert [stages[k] for k in ("conv1", "pool1", "res2", "res3", "res4", "res5")] == [4] * 6
    assert {v for k, v in stages.items() if k.startswith("fast_")} == {32}
    info = model_info(ModelConfig(name="slowfast_resnet50_8x8"), frames=16, size=64)
    assert info.stage_frames["res5"] == 4 and info.stage_frames["fast_res5"] == 16


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"shift_div": 4}, "shift"),
        ({"shift_place": "block"}, "shift"),
        ({"shift_every": 2}, "shift"),
        ({"temporal_pool": True}, "temporal_pool"),
        ({"pretrained": "/nonexistent/resnet50.pth"}, "from scratch"),
    ],
)
def test_inapplicable_options_are_refused(change: dict[str, object], match: str) -> None:
    for name in NAMES:
        with pytest.raises(ValueError, match=match), torch.device("meta"):
            build_model(ModelConfig(name=name, **change))  # type: ignore[arg-type]


def test_config_reaches_the_model() -> None:
    cfg = ModelConfig(name="slowfast_resnet50_8x8", num_classes=7, in_channels=2, dropout=0.2)
    with torch.device("meta"):
        model = build_model(cfg)
    assert isinstance(model, SlowFast) and model.spec == SPECS[cfg.name]
    assert model.fc.out_features == 7 and model.dropout.p == 0.2
    assert model.slow.conv1.in_channels == 2 and model.fast.conv1.in_channels == 2


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="odd"):
        SlowFastSpec(alpha=8, fusion_kernel=4)
    with pytest.raises(ValueError, match="alpha"):
        SlowFastSpec(alpha=0, fusion_kernel=5)
    with pytest.raises(ValueError, match="frame"):
        SLOWFAST_4X16.slow_frames(0)
    assert [SLOWFAST_4X16.slow_frames(t) for t in (32, 16, 8, 12, 4)] == [4, 2, 1, 2, 1]


def test_trunk_options_default_to_the_torchvision_trunk() -> None:
    with torch.device("meta"):
        full = ResNet(50)
        trunk = ResNetTrunk(50)
        thin = ResNetTrunk(50, width_div=8, extra_in_channels=(1, 2, 3, 4))
    assert list(trunk.state_dict()) == [k for k in full.state_dict() if not k.startswith("fc.")]
    assert full.stage_channels == trunk.stage_channels == (64, 256, 512, 1024, 2048)
    assert thin.stage_channels == (8, 32, 64, 128, 256)
    thin_sd = thin.state_dict()
    assert thin_sd["layer2.0.conv1.weight"].shape[1] == 32 + 2  # res3's input: res2 + extra
    assert thin_sd["layer2.1.conv1.weight"].shape[1] == 64
    with pytest.raises(ValueError, match="width_div"):
        ResNetTrunk(50, width_div=3)
    with pytest.raises(ValueError, match="extra_in_channels"):
        ResNetTrunk(50, extra_in_channels=(0, 0, -1, 0))
