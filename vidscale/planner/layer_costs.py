"""Per-layer parameters and multiply-accumulates of a registry model, in forward order.

The scaling model (`planner/scaling_model.py`) needs to know when each gradient becomes ready
during the backward pass: backward visits the layers in reverse forward order and spends on each
a time proportional to its work. This table is that input. It is counted the way
`bench/compute/flops.py` counts a whole model: the model is built on the meta device (no weights, no
arithmetic) and run once on a (1, C, T, H, W) clip; a forward hook on every module that owns
parameters records, in execution order, its parameter count and, for convolutions and linear
layers, its multiply-accumulates (output elements x input channels per group x kernel volume).
BatchNorm layers own parameters but are given no MACs: their time is memory-bound and small next
to the convolutions, and leaving them out keeps the backward time proportional to the counted
work (`flops.py` leaves them out too, so the sums agree with `vidscale info`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import nn

from vidscale.models.registry import ModelConfig, build_model, default_frames


@dataclass(frozen=True)
class LayerCost:
    """One parameter-owning module: `params` (elements) and `macs` for one clip."""

    name: str
    params: int
    macs: int


@dataclass(frozen=True)
class ModelCosts:
    """A model's layers in forward execution order, with totals for one clip of `frames`."""

    model: str
    frames: int
    size: int
    layers: tuple[LayerCost, ...]

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)


def _macs(module: nn.Module, out: torch.Tensor) -> int:
    if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d):
        per_output = (module.in_channels // module.groups) * math.prod(module.kernel_size)
        return out.numel() * per_output
    if isinstance(module, nn.Linear):
        return out.numel() * module.in_features
    return 0


@lru_cache(maxsize=32)
def model_costs(
    name: str, *, frames: int | None = None, size: int = 224, num_classes: int = 400
) -> ModelCosts:
    """The per-layer table of registry model `name` for one frames x size x size clip.

    `frames` defaults to the model's own clip length (`default_frames`). Modules that own
    parameters but never run in the forward pass would be missed; every registry model runs all
    of its parameters. Raises ValueError for an unknown model (the registry's message).
    """
    frames = frames or default_frames(name)
    cfg = ModelConfig(name=name, num_classes=num_classes, frames=frames, dropout=0.0)
    with torch.device("meta"):
        model = build_model(dataclasses.replace(cfg, pretrained=None))
    names = {module: qualified for qualified, module in model.named_modules()}
    layers: list[LayerCost] = []

    def record(module: nn.Module, _inputs: object, out: object) -> None:
        params = sum(p.numel() for p in module.parameters(recurse=False))
        macs = _macs(module, out) if isinstance(out, torch.Tensor) else 0
        layers.append(LayerCost(names[module], params, macs))

    owners = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    handles = [m.register_forward_hook(record) for m in owners]
    clip = torch.zeros(1, cfg.in_channels, frames, size, size, device="meta")
    try:
        with torch.no_grad():
            model.eval()(clip)
    finally:
        for handle in handles:
            handle.remove()
    return ModelCosts(model=name, frames=frames, size=size, layers=tuple(layers))
