"""Model cost against hand counts and the TSM paper's Table 1."""

import json

import pytest
import torch
from torch import nn

from vidscale.bench.compute.flops import count_macs, format_info, info_as_dict, model_info
from vidscale.models.registry import ModelConfig


def test_count_macs_of_a_conv_and_a_linear_by_hand() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 5 * 5, 10),
    )
    # conv: 8 out channels x 5 x 5 positions x (3 x 3 x 3) taps; linear: 200 x 10; per sample.
    assert count_macs(model, input_shape=(2, 3, 5, 5)) == 2 * (8 * 25 * 27 + 200 * 10)


def test_count_macs_restores_training_mode() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout()).train()
    count_macs(model, input_shape=(1, 4))
    assert model.training


def test_tsm_resnet50_matches_table1() -> None:
    info = model_info(ModelConfig(name="tsm_resnet50", num_classes=400), frames=8, size=224)
    assert info.params == 24_327_632
    assert info.macs == pytest.approx(33e9, rel=0.02)  # 8 frames x 4.1 GMACs
    assert info.flops == 2 * info.macs
    assert info.input_shape == (1, 3, 8, 224, 224)
    assert info.input_bytes == 8 * 3 * 224 * 224
    assert info.compute_per_io == pytest.approx(27.4e3, rel=0.02)  # Table 1: 27.4k


@pytest.mark.parametrize(
    ("name", "frames", "params", "macs", "compute_per_io"),
    [
        ("i3d_resnet50_3x3x3", 16, 47.0e6, 40e9, 16.6e3),
        ("i3d_resnet50_3x1x1", 32, 29.3e6, 33e9, 6.85e3),
    ],
)
def test_i3d_matches_table1(
    name: str, frames: int, params: float, macs: float, compute_per_io: float
) -> None:
    info = model_info(ModelConfig(name=name, num_classes=400), frames=frames, size=224)
    assert info.params == pytest.approx(params, rel=0.02)
    assert info.macs == pytest.approx(macs, rel=0.05)
    assert info.compute_per_io == pytest.approx(compute_per_io, rel=0.05)


def test_tsn_costs_what_tsm_costs() -> None:
    tsm = model_info(ModelConfig(name="tsm_resnet50"), frames=8, size=112)
    tsn = model_info(ModelConfig(name="tsn_resnet50"), frames=8, size=112)
    assert (tsm.params, tsm.macs) == (tsn.params, tsn.macs)


def test_pretrained_path_is_not_read_for_counting() -> None:
    cfg = ModelConfig(name="tsn_resnet18", num_classes=10, pretrained="/nonexistent.pth")
    assert model_info(cfg, frames=2, size=64).params > 0


def test_flow_input_counts_its_channels() -> None:
    info = model_info(ModelConfig(name="tsn_resnet18", in_channels=20), frames=2, size=64)
    assert info.input_shape == (1, 20, 2, 64, 64)
    assert info.input_bytes == 20 * 2 * 64 * 64


def test_human_and_json_output() -> None:
    info = model_info(ModelConfig(name="i3d_resnet50_3x1x1"), frames=32, size=224)
    text = format_info(info)
    assert "i3d_resnet50_3x1x1" in text and "29.1M" in text and "pool2=4" in text
    data = json.loads(json.dumps(info_as_dict(info)))
    assert data["input_shape"] == [1, 3, 32, 224, 224]
    assert data["stage_frames"]["res5"] == 4
    assert data["flops"] == 2 * data["macs"]


def test_meta_counting_equals_real_counting() -> None:
    from vidscale.models.registry import build_model

    cfg = ModelConfig(name="tsm_resnet18", num_classes=5)
    real = count_macs(build_model(cfg), input_shape=(1, 3, 2, 32, 32))
    assert real == model_info(cfg, frames=2, size=32).macs
    assert torch.get_default_device() == torch.device("cpu")
