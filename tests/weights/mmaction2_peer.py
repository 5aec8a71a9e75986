"""MMAction2's side of the import proof, run by the peer environment's Python (never by pytest).

`python mmaction2_peer.py WORKDIR` reads WORKDIR/request.json: a list of {"name", "config"
(a path under the installed package's `.mim/configs`), "num_classes", "seed", "layout" ("3d" or
"2d"), optionally "frames" (the model reads the clip's first ones; default all)}, and
WORKDIR/clip_uint8.pt, WORKDIR/clip_float64.pt (N, C, T, H, W). For each model it
builds MMAction2's own recognizer from the config (no pretrained download), gives every
parameter random values (non-local output BNs included, which MMAction2 starts at zero) and
its BN statistics those of one pass over the clip, and writes WORKDIR/NAME.pth, a checkpoint as MMAction2 saves one ({"state_dict",
"meta"}, float32), and WORKDIR/NAME_logits.pt: its backbone and head run in float64 eval mode on
the float64 clip. WORKDIR/normalized.pt is the uint8 clip through the config's
`ActionDataPreprocessor` (float32).

A request with a "checkpoint" (a file path) is the export proof's instead: the model is built
from its config as above, the file loaded into it by MMEngine's
`load_checkpoint(model, FILE, strict=True)` (no random weights, nothing saved), and its float64
logits written to WORKDIR/NAME_logits.pt.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn


def _configs_root() -> Path:
    mmaction = importlib.import_module("mmaction")
    return Path(str(mmaction.__file__)).parent / ".mim" / "configs"


def build(config: str, num_classes: int) -> Any:
    """MMAction2's recognizer of `config`, randomly initialised, no pretrained weights."""
    cfg = importlib.import_module("mmengine.config").Config.fromfile(_configs_root() / config)
    importlib.import_module("mmaction.utils").register_all_modules()
    cfg.model.backbone.pretrained = None
    cfg.model.cls_head.num_classes = num_classes
    models = importlib.import_module("mmaction.registry").MODELS
    return models.build(cfg.model)


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
            elif isinstance(m, nn.Conv2d | nn.Conv3d | nn.Linear):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


def calibrate(model: Any, clip: torch.Tensor, layout: str) -> None:
    """Running statistics of one training-mode pass over `clip` (BN momentum 1): random
    weights with made-up statistics let activations grow without bound through 16 blocks."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.momentum = 1.0
    model.train()
    with torch.no_grad():
        logits(model, clip, layout)
    for bn in bns:
        bn.momentum = 0.1


def logits(model: Any, clip: torch.Tensor, layout: str) -> torch.Tensor:
    """The recognizer's class scores before `average_clips`: backbone, then head."""
    if layout == "3d":
        return model.cls_head(model.backbone(clip))
    n, c, t, h, w = clip.shape
    frames = clip.transpose(1, 2).reshape(n * t, c, h, w)  # Recognizer2D's (N * segs, C, H, W)
    return model.cls_head(model.backbone(frames), num_segs=t)


def main(workdir: Path) -> None:
    requests = json.loads((workdir / "request.json").read_text())
    clip_all = torch.load(workdir / "clip_float64.pt", weights_only=True)
    for req in requests:
        model = build(req["config"], req["num_classes"])
        clip64 = clip_all[:, :, : req.get("frames", clip_all.shape[2])]
        if "checkpoint" in req:
            load = importlib.import_module("mmengine.runner").load_checkpoint
            load(model, req["checkpoint"], map_location="cpu", strict=True)
            with torch.no_grad():
                scores = logits(model.double().eval(), clip64, req["layout"])
            torch.save(scores, workdir / f"{req['name']}_logits.pt")
            continue
        randomise(model, req["seed"])
        calibrate(model, clip64.float(), req["layout"])
        state = {k: v.float() for k, v in model.state_dict().items()}
        meta = {"mmaction2_config": req["config"], "seed": req["seed"]}
        torch.save({"state_dict": state, "meta": meta}, workdir / f"{req['name']}.pth")
        model = model.double().eval()
        with torch.no_grad():
            scores = logits(model, clip64, req["layout"])
        torch.save(scores, workdir / f"{req['name']}_logits.pt")
    if (workdir / "clip_uint8.pt").is_file() and requests:
        clip8 = torch.load(workdir / "clip_uint8.pt", weights_only=True)
        model = build(requests[0]["config"], requests[0]["num_classes"])
        # ActionDataPreprocessor takes a batch of (C, T, H, W) clips for format NCTHW
        data = {"inputs": list(clip8), "data_samples": None}
        normalized = model.data_preprocessor(data, training=False)["inputs"]
        torch.save(normalized, workdir / "normalized.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
