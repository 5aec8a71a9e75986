"""What a model costs per clip, counted once: parameters and multiply-accumulates, per layer and
in total, and the TSM paper's Compute/IO (Table 1).

One meta-device forward pass (no weights allocated, nothing computed: ResNet-50 I3D costs
milliseconds) of a (1, C, T, H, W) clip is counted two ways at once:

- **per layer**, in forward execution order: a forward hook on every module that owns parameters
  records its parameter count and, for convolutions and linear layers, its MACs (output
  elements x input channels per group x kernel volume). BatchNorm owns parameters but gets no
  MACs (memory-bound, small next to the convolutions). The planner reads this table
  (`planner.scaling_model`): backward visits the layers in reverse order, spending on each a
  time proportional to its work, so this says when each gradient becomes ready;
- **in total**, by `torch.utils.flop_counter.FlopCounterMode` (FLOPs = 2 x MACs for
  convolutions and matrix products; BN, ReLU, pooling and the temporal shift are not counted):
  what `vidscale info`, `bench models` and the multigrid study report. It equals the per-layer
  sum except where a model multiplies activations by activations, which no layer owns: the
  non-local blocks' attention (`unowned_macs`).

The paper's Table 1 quotes "FLOPs" of 33G for TSM_8f (8 x 4.1G) and Compute/IO 27.4k = 33G /
(8 x 3 x 224 x 224); I3D 3x1x1 gives 33G / (32 x 3 x 224^2) = 6.85k and I3D 3x3x3 40G / (16 x 3
x 224^2) = 16.6k. So its "FLOPs" are multiply-accumulates and its IO is the clip's size in
bytes as uint8 frames: `compute_per_io = macs / input_bytes`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from vidscale.models.registry import (
    ModelConfig,
    build_model,
    default_frames,
    stage_temporal_resolutions,
)


@dataclass(frozen=True)
class LayerCost:
    """One parameter-owning module: `params` (elements) and `macs` for one clip."""

    name: str
    params: int
    macs: int


@dataclass(frozen=True)
class ModelCosts:
    """A model's layers in forward execution order for one clip of `frames` x `size`², and its
    total MACs (`total_macs`, which counts what no layer owns too)."""

    model: str
    frames: int
    size: int
    layers: tuple[LayerCost, ...]
    total_macs: int = 0

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def macs(self) -> int:
        """The layers' MACs: the work backward spends layer by layer."""
        return sum(layer.macs for layer in self.layers)

    @property
    def unowned_macs(self) -> int:
        """MACs between activations that no layer owns (non-local attention)."""
        return self.total_macs - self.macs


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


def _layer_macs(module: nn.Module, out: torch.Tensor) -> int:
    if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d):
        per_output = (module.in_channels // module.groups) * math.prod(module.kernel_size)
        return out.numel() * per_output
    if isinstance(module, nn.Linear):
        return out.numel() * module.in_features
    return 0


def count_costs(model: nn.Module, *, input_shape: tuple[int, ...], name: str = "") -> ModelCosts:
    """`model`'s per-layer table and total MACs for one forward pass of zeros of
    `input_shape` (on the model's device and dtype; the meta device computes nothing), in eval
    mode without autograd; the model's mode is restored. Modules that own parameters but never
    run forward are missed: every registry model runs all of its parameters."""
    names = {module: qualified for qualified, module in model.named_modules()}
    layers: list[LayerCost] = []

    def record(module: nn.Module, _inputs: object, out: object) -> None:
        params = sum(p.numel() for p in module.parameters(recurse=False))
        macs = _layer_macs(module, out) if isinstance(out, torch.Tensor) else 0
        layers.append(LayerCost(names[module], params, macs))

    owners = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    handles = [m.register_forward_hook(record) for m in owners]
    param = next(model.parameters())
    clip = torch.zeros(input_shape, device=param.device, dtype=param.dtype)
    was_training = model.training
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.eval()(clip)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    frames = input_shape[2] if len(input_shape) == 5 else 1  # an image model's (1, C, H, W)
    total = counter.get_total_flops() // 2
    size = input_shape[-1]
    return ModelCosts(name, frames, size, tuple(layers), total_macs=total)


def _meta_model(cfg: ModelConfig) -> nn.Module:
    with torch.device("meta"):
        return build_model(dataclasses.replace(cfg, pretrained=None, init_from=""))


@lru_cache(maxsize=32)
def model_costs(
    name: str, *, frames: int | None = None, size: int = 224, num_classes: int = 400
) -> ModelCosts:
    """The per-layer table of registry model `name` for one frames x size x size clip.
    `frames` defaults to the model's own clip length (`default_frames`). Raises ValueError for
    an unknown model (the registry's message)."""
    frames = frames or default_frames(name)
    cfg = ModelConfig(name=name, num_classes=num_classes, frames=frames, dropout=0.0)
    shape = (1, cfg.in_channels, frames, size, size)
    return count_costs(_meta_model(cfg), input_shape=shape, name=name)


def model_info(cfg: ModelConfig, *, frames: int, size: int) -> ModelInfo:
    """Parameters, MACs (in total) and Compute/IO of `cfg`'s model for one frames x size x size
    clip, with the frames at the output of each stage (Table 2)."""
    model = _meta_model(cfg)
    shape = (1, cfg.in_channels, frames, size, size)
    costs = count_costs(model, input_shape=shape, name=cfg.name)
    input_bytes = cfg.in_channels * frames * size * size
    return ModelInfo(
        name=cfg.name,
        params=sum(p.numel() for p in model.parameters()),
        macs=costs.total_macs,
        flops=2 * costs.total_macs,
        input_shape=shape,
        input_bytes=input_bytes,
        compute_per_io=costs.total_macs / input_bytes,
        stage_frames=stage_temporal_resolutions(model, frames=frames),
    )


def count_macs(model: nn.Module, *, input_shape: tuple[int, ...]) -> int:
    """The total multiply-accumulates of one forward pass of `model` (`count_costs`)."""
    return count_costs(model, input_shape=input_shape).total_macs
