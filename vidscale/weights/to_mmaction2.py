"""A vidscale run as an MMAction2 1.x checkpoint: the reverse of `import_weights`.

The run's state_dict under MMAction2's key names (`mmaction2.key_table`, the import's table
applied forwards) in the file MMAction2 saves and loads: `{"state_dict": ..., "meta": ...}`,
tensors and plain str/int metadata only, so `torch.load(weights_only=True)` reads it. The meta
names the MMAction2 config of the same network and, as MMEngine's runner keeps it, the classes
under `dataset_meta`. MMAction2 builds the model from that config with
`model.cls_head.num_classes` set to the run's class count and loads the file strictly.

Only the networks `import-weights` covers are exported, and only as MMAction2's configs build
them: an RGB input of 3 channels and the default TSM shift, no temporal pooling. Any other run
is refused, saying why (`check_exportable`). A run normalised otherwise than MMAction2's
configs (ImageNet's statistics) is exported with its statistics in the sidecar's
`data_preprocessor`, which the config must then be given (`sidecar`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from vidscale.config import RunConfig
from vidscale.data.inputs import ModelInput
from vidscale.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from vidscale.errors import InputError
from vidscale.models.registry import ModelConfig
from vidscale.weights.mmaction2 import FORMAT, SOURCES, key_table, refusal
from vidscale.weights.source import Source

# ModelConfig fields that change the network away from MMAction2's config when not the default.
VARIANT_FIELDS = ("in_channels", "shift_div", "shift_place", "shift_every", "temporal_pool")
RECOGNITION = "configs/recognition/{}/{}.py"


def check_exportable(cfg: RunConfig, run: Path) -> Source:
    """The MMAction2 source of the run's network; another network is an `InputError` naming
    the run, its model and the reason."""
    name = cfg.model.name
    what = f"{run} ({name}): not exportable to {FORMAT}"
    if name not in SOURCES:
        raise InputError(f"{what} {refusal(name)}")
    default = ModelConfig()
    changed = [
        f"model.{field}={getattr(cfg.model, field)}"
        for field in VARIANT_FIELDS
        if getattr(cfg.model, field) != getattr(default, field)
    ]
    if changed:
        raise InputError(f"{what}: {', '.join(changed)} is not the network of MMAction2's config")
    modality = cfg.data.eval_clip.modality
    if modality != "rgb":
        raise InputError(f"{what}: its input is {modality}; MMAction2's configs take RGB clips")
    return SOURCES[name]


def config_path(source: Source) -> str:
    """The first config's file under MMAction2's package (`configs/recognition/...`)."""
    zoo = source.configs[0]
    return RECOGNITION.format(zoo.split("_", 1)[0], zoo)


def mmaction2_state(state: Mapping[str, Tensor], *, model: str) -> dict[str, Tensor]:
    """Vidscale model `model`'s `state` under MMAction2's keys: the same tensors, copied."""
    table = key_table(state, model=model)
    return {theirs: state[ours].detach().clone().contiguous() for theirs, ours in table.items()}


def mmaction2_checkpoint(
    state: Mapping[str, Tensor], *, model: str, classes: list[str], checkpoint: Path
) -> dict[str, Any]:
    """The file's contents: MMAction2's state_dict and a meta of plain values."""
    source = SOURCES[model]
    meta = {
        "config": config_path(source),
        "num_classes": len(classes),
        "dataset_meta": {"classes": list(classes)},
        "vidscale_model": model,
        "vidscale_checkpoint": str(checkpoint),
    }
    return {"state_dict": mmaction2_state(state, model=model), "meta": meta}


def sidecar(cfg: RunConfig, *, classes: list[str], checkpoint: Path, out: Path) -> dict[str, Any]:
    """`FILE.json`: what the file is and how MMAction2 loads it.

    `data_preprocessor` is the mean and std (0..255, RGB) MMAction2's `ActionDataPreprocessor`
    must normalise with: the run's (`data.mean`/`data.std` x 255). MMAction2's configs set
    ImageNet's; for a run normalised otherwise (a PyTorchVideo or PySlowFast import) `usage`
    says to override them, since the weights expect the run's input."""
    source = SOURCES[cfg.model.name]
    spec = cfg.data.eval_clip
    mean, std = ModelInput.of(spec, cfg.data).statistics()
    config = config_path(source)
    settings = f"model.cls_head.num_classes={len(classes)}"
    if (mean, std) != (IMAGENET_MEAN, IMAGENET_STD):
        settings += (
            f", model.data_preprocessor.mean={list(mean)} and "
            f"model.data_preprocessor.std={list(std)}"
        )
    return {
        "format": FORMAT,
        "contents": "MMAction2 1.x checkpoint: state_dict (MMAction2's keys) and meta",
        "config": config,
        "configs": list(source.configs),
        "model": cfg.model.name,
        "checkpoint": str(checkpoint),
        "num_classes": len(classes),
        "classes": classes,
        "normalize": {"scale": "0..255", "mean": list(mean), "std": list(std)},
        "data_preprocessor": {"mean": list(mean), "std": list(std)},
        "views": {"frames": spec.frames, "clips": spec.num_clips, "crops": spec.num_crops},
        "usage": (
            f"build MMAction2's {config} with {settings}, then "
            f"mmengine.runner.load_checkpoint(model, '{out.name}', strict=True)"
        ),
    }
