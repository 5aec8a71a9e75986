"""Model cost: parameters, multiply-accumulates, and the TSM paper's Compute/IO (Table 1).

MACs are counted by `torch.utils.flop_counter.FlopCounterMode` (which reports FLOPs = 2 x MACs
for convolutions and matmuls; BN, ReLU, pooling and the temporal shift are not counted).
`model_info` builds the model on the meta device, so no weights are allocated and nothing is
computed: ResNet-50 I3D costs milliseconds.

Compute/IO: the paper's Table 1 quotes ResNet-50-sized "FLOPs" of 33G for TSM_8f (8 x 4.1G) and
Compute/IO 27.4k = 33G / (8 x 3 x 224 x 224); I3D 3x1x1 gives 33G / (32 x 3 x 224^2) = 6.85k
and I3D 3x3x3 40G / (16 x 3 x 224^2) = 16.6k. So its "FLOPs" are multiply-accumulates and its
IO is the clip's size in bytes as uint8 frames: here `compute_per_io = macs / input_bytes`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from vidscale.models.registry import ModelConfig, build_model, stage_temporal_resolutions


@dataclass(frozen=True)
class ModelInfo:
    """Cost of one clip through one model (`input_shape` is (1, C, T, H, W))."""

    name: str
    params: int
    macs: int
    flops: int
    input_shape: tuple[int, ...]
    input_bytes: int
    compute_per_io: float
    stage_frames: dict[str, int] = field(default_factory=dict)


def count_macs(model: nn.Module, *, input_shape: tuple[int, ...]) -> int:
    """Multiply-accumulates of one forward pass in eval mode, without autograd.

    The input is zeros on the model's device and dtype (the meta device computes nothing). The
    model's train/eval mode is restored afterwards.
    """
    param = next(model.parameters())
    x = torch.zeros(input_shape, device=param.device, dtype=param.dtype)
    was_training = model.training
    model.eval()
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(x)
    finally:
        model.train(was_training)
    return counter.get_total_flops() // 2


def model_info(cfg: ModelConfig, *, frames: int, size: int) -> ModelInfo:
    """Parameters, MACs and Compute/IO of `cfg`'s model for one frames x size x size clip."""
    with torch.device("meta"):
        model = build_model(dataclasses.replace(cfg, pretrained=None))
    shape = (1, cfg.in_channels, frames, size, size)
    macs = count_macs(model, input_shape=shape)
    input_bytes = cfg.in_channels * frames * size * size
    return ModelInfo(
        name=cfg.name,
        params=sum(p.numel() for p in model.parameters()),
        macs=macs,
        flops=2 * macs,
        input_shape=shape,
        input_bytes=input_bytes,
        compute_per_io=macs / input_bytes,
        stage_frames=stage_temporal_resolutions(model, frames=frames),
    )


def format_info(info: ModelInfo) -> str:
    """Human-readable block, in the units of the paper's Table 1 and Table 2."""
    _, c, t, h, w = info.input_shape
    stages = "  ".join(f"{k}={v}" for k, v in info.stage_frames.items())
    return "\n".join(
        [
            f"model           {info.name}",
            f"parameters      {info.params:,} ({info.params / 1e6:.1f}M)",
            f"MACs / clip     {info.macs / 1e9:.2f}G (FLOPs {info.flops / 1e9:.2f}G)",
            f"input           {t}x{c}x{h}x{w} = {info.input_bytes:,} bytes as uint8",
            f"Compute/IO      {info.compute_per_io / 1e3:.2f}k MACs per input byte",
            f"frames / stage  {stages}",
        ]
    )


def info_as_dict(info: ModelInfo) -> dict[str, Any]:
    """JSON-ready dict (tuples become lists)."""
    out = dataclasses.asdict(info)
    out["input_shape"] = list(info.input_shape)
    return out
