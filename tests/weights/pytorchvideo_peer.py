"""PyTorchVideo's side of the import proofs, run by the peer environment's Python (never by pytest).

`python pytorchvideo_peer.py WORKDIR` reads WORKDIR/request.json, a list of {"name", "hub" (a
pytorchvideo.models.hub builder: "slowfast_r50", "slow_r50", "i3d_r50", or
"create_slowfast"), "kwargs" (more arguments to it, e.g. a 4x16 fusion), "alpha" (SlowFast's frame ratio, 0 for one pathway),
"num_classes", "seed"}, and WORKDIR/clip_float64.pt (N, C, T, H, W). For each it builds the
hub's model with `pretrained=False`, its head pool sized to the clip's res5 map (the hub's
fixed (frames, 7, 7) fits 224-pixel crops only), gives every parameter random values and its
BN statistics those of one pass over the clip, and writes WORKDIR/NAME.pyth as the hub
publishes a checkpoint ({"model_state", float32}) and WORKDIR/NAME_logits.pt, its float64
eval-mode logits on the clip, the Slow frames picked as the hub's `PackPathway` picks them.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn


def randomise(model: nn.Module, seed: int) -> None:
    """Every float tensor random; BN scales and variances positive, near 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
                assert m.running_mean is not None and m.running_var is not None
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
            elif isinstance(m, nn.Conv3d | nn.Linear):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


def pathways(clip: torch.Tensor, alpha: int) -> Any:
    """The hub's input: the clip, or [slow, fast] with `PackPathway`'s Slow frames."""
    if not alpha:
        return clip
    frames = clip.shape[2]
    index = torch.linspace(0, frames - 1, frames // alpha).long()
    return [clip.index_select(2, index), clip]


def build(req: dict[str, Any], clip: torch.Tensor) -> nn.Module:
    hub = importlib.import_module("pytorchvideo.models.hub")
    t, h, w = clip.shape[2], clip.shape[3] // 32, clip.shape[4] // 32
    kwargs = dict(req.get("kwargs", {}))
    if req["alpha"]:
        kwargs["head_pool_kernel_sizes"] = ((t // req["alpha"], h, w), (t, h, w))
    if req["hub"].startswith("create_"):  # a builder of pytorchvideo.models, not a hub entry
        create = getattr(importlib.import_module("pytorchvideo.models"), req["hub"])
        return create(model_num_class=req["num_classes"], **kwargs)
    builder = getattr(hub, req["hub"])
    model = builder(pretrained=False, model_num_class=req["num_classes"], **kwargs)
    if not req["alpha"]:
        # slow_r50 fixes head_pool_kernel_size itself, so the pool is replaced after the build,
        # as create_res_basic_head makes it (stride 1, no padding). i3d_r50 halves time after
        # res2 (its stage1_pool); slow_r50 keeps it.
        frames = t // 2 if req["hub"] == "i3d_r50" else t
        model.blocks[-1].pool = nn.AvgPool3d((frames, h, w), stride=(1, 1, 1), padding=(0, 0, 0))
    return model


def calibrate(model: nn.Module, inputs: Any) -> None:
    """Running statistics of one training-mode pass (BN momentum 1): random weights with
    made-up statistics let activations grow without bound through 16 blocks."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.momentum = 1.0
    model.train()
    with torch.no_grad():
        model(inputs)
    for bn in bns:
        bn.momentum = 0.1


def main(workdir: Path) -> None:
    requests = json.loads((workdir / "request.json").read_text())
    clip64 = torch.load(workdir / "clip_float64.pt", weights_only=True)
    for req in requests:
        model = build(req, clip64)
        randomise(model, req["seed"])
        calibrate(model, pathways(clip64.float(), req["alpha"]))
        state = {
            k: v.float() if v.is_floating_point() else v for k, v in model.state_dict().items()
        }
        torch.save({"model_state": state, "epoch": 0}, workdir / f"{req['name']}.pyth")
        model = model.double().eval()
        with torch.no_grad():
            scores = model(pathways(clip64, req["alpha"]))
        torch.save(scores, workdir / f"{req['name']}_logits.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
