"""Every registered model: output shape, a gradient in every parameter; registry contracts."""

from collections.abc import Iterable
from typing import cast

import pytest
import torch

from vidscale.models.nonlocal_block import NonLocalBlock
from vidscale.models.registry import (
    MODELS,
    ModelConfig,
    build_model,
    default_frames,
    list_models,
    stage_temporal_resolutions,
)
from vidscale.models.resnet import Bottleneck, ResNet

REQUIRED = {
    "tsm_resnet18", "tsm_resnet50", "tsm_resnet101",
    "tsn_resnet18", "tsn_resnet50", "tsn_resnet101",
    "i3d_resnet50_3x3x3", "i3d_resnet50_3x1x1", "online_tsm_resnet50",
    "i3d_nl_resnet50_3x1x1", "i3d_nl_embedded_gaussian_resnet50_3x1x1",
    "i3d_resnet50_ref", "i3d_nl_resnet50_ref", "i3d_nl_embedded_gaussian_resnet50_ref",
}  # fmt: skip


def test_registry_lists_the_required_models() -> None:
    assert set(list_models()) >= REQUIRED
    assert list_models() == sorted(MODELS)


@pytest.mark.slow
@pytest.mark.parametrize("name", list_models())
def test_every_model_trains(name: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model(ModelConfig(name=name, num_classes=3))
    for block in model.modules():
        if isinstance(block, NonLocalBlock):  # γ = 0 keeps its inner parameters' gradients at 0
            torch.nn.init.constant_(block.out_bn.weight, 0.5)
    # Enough frames to survive the temporal strides of I3D 3x1x1 and the reference I3D
    # (8 -> 4 -> 2 -> 1), few otherwise.
    frames = 8 if name.endswith(("_3x1x1", "_ref")) else 4
    size = 64 if name == "alexnet_bn" else 32  # AlexNet's three 3/2 max-pools need >= 63 px
    if "_nl_" in name:  # res4 at 3x3 px: a softmax over one sub-sampled position has no gradient
        size = 48
    logits = model(torch.randn(2, 3, frames, size, size))
    assert logits.shape == (2, 3)
    logits.logsumexp(dim=1).sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_clip_length_may_change_between_calls() -> None:
    model = build_model(ModelConfig(name="tsm_resnet18", num_classes=4)).eval()
    for frames in (2, 3, 8):
        assert model(torch.randn(1, 3, frames, 32, 32)).shape == (1, 4)


def test_unknown_name_lists_available() -> None:
    with pytest.raises(ValueError, match="tsm_resnet50"):
        build_model(ModelConfig(name="resnet9000"))
    with pytest.raises(ValueError, match="i3d_resnet50_3x3x3"):
        default_frames("nope")


def test_bad_config_values_are_rejected() -> None:
    with pytest.raises(ValueError, match="num_classes"):
        build_model(ModelConfig(name="tsn_resnet18", num_classes=0))
    with pytest.raises(ValueError, match="dropout"):
        build_model(ModelConfig(name="tsn_resnet18", dropout=1.0))
    with pytest.raises(ValueError, match="temporal_pool"):
        build_model(ModelConfig(name="i3d_resnet50_3x3x3", temporal_pool=True))


def test_default_frames_follow_the_paper() -> None:
    assert default_frames("tsm_resnet50") == 8
    assert default_frames("i3d_resnet50_3x3x3") == 16
    assert default_frames("i3d_resnet50_3x1x1") == 32
    assert ModelConfig() == ModelConfig(name="tsm_resnet50", num_classes=400, frames=8)


def test_table2_rows_from_the_registry() -> None:
    rows = {
        name: list(
            stage_temporal_resolutions(ModelConfig(name=name), frames=default_frames(name)).values()
        )
        for name in ("i3d_resnet50_3x3x3", "i3d_resnet50_3x1x1", "tsm_resnet50")
    }
    # data, conv1, pool1, res2, [pool2], res3, res4, res5, global pool (TSM paper Table 2)
    assert rows["i3d_resnet50_3x3x3"] == [16, 16, 8, 8, 4, 2, 1, 1]
    assert rows["i3d_resnet50_3x1x1"] == [32, 16, 8, 8, 4, 4, 4, 4, 1]
    assert rows["tsm_resnet50"] == [8, 8, 8, 8, 8, 8, 8, 1]


def test_config_knobs_reach_the_trunk() -> None:
    cfg = ModelConfig(
        name="tsm_resnet50", shift_div=4, shift_place="block", shift_every=2, temporal_pool=True
    )
    with torch.device("meta"):
        trunk = cast(ResNet, build_model(cfg).trunk)
    blocks = cast(Iterable[Bottleneck], trunk.layer3)
    shifts = [b.shift for b in blocks]
    assert [s is not None for s in shifts] == [True, False] * 3
    assert shifts[0] is not None
    assert shifts[0].fold_div == 4 and trunk.layer3[0].shift_place == "block"
    assert stage_temporal_resolutions(cfg, frames=8)["res3"] == 4


def test_temporal_pool_halves_the_frames_averaged() -> None:
    model = build_model(ModelConfig(name="tsm_resnet18", num_classes=2, temporal_pool=True))
    assert model.frame_logits(torch.randn(1, 3, 8, 32, 32)).shape == (1, 4, 2)  # type: ignore[operator]
