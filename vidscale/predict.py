"""`vidscale predict VIDEO --checkpoint RUN`: the top-k classes of one video from a trained run.

The video is sampled the way the run evaluates (its saved `data.eval_clip`: frames, uniform or
dense sampling, short side, crop), with `num_clips` clips along time x `num_crops` spatial crops
if asked; the softmax of every view is averaged into the video's probabilities (the TSM paper's
test protocol, §4.1: "sample 10 clips per video and calculate the average prediction"). `RUN`
may also be a checkpoint file inside a run (`locate`). The model runs in float32 on the CPU
by default, so a prediction needs neither a GPU nor the training dataset: the class names come
from `RUN/classes.txt`, written by training (older runs: the class list under `data.root`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vidscale.config import ConfigError, RunConfig, load_config
from vidscale.data.annotations import read_class_names
from vidscale.data.dataset import ClipSpec, frame_indices, make_clip
from vidscale.data.decode import DecodeError, decode_frames, probe
from vidscale.data.transforms import input_normalization, normalize
from vidscale.models.registry import build_model
from vidscale.train.builders import resolve_path
from vidscale.train.checkpoint import CHECKPOINT_PATTERN, epoch_checkpoints, load_weights
from vidscale.train.metrics import read_metrics

VIEWS_PER_FORWARD = 8  # views run through the model at once (bounds activation memory)


@dataclass(frozen=True)
class LoadedRun:
    """A run's resolved config, its model in eval mode with checkpoint weights, class names."""

    cfg: RunConfig
    model: nn.Module
    classes: list[str]
    checkpoint: Path


def checkpoint_path(run: Path, checkpoint: str) -> Path:
    """`checkpoint` as a file: an existing path, "best" (the epoch checkpoint with the highest
    validation top-1 in RUN/metrics.jsonl), or a name in RUN/checkpoints ("last", "epoch_0016",
    with or without ".pt")."""
    given = Path(checkpoint)
    if given.suffix == ".pt" and given.is_file():
        return given
    if checkpoint == "best":
        return best_checkpoint(run)
    path = Path(run) / "checkpoints" / (given.stem + ".pt")
    if not path.is_file():
        found = sorted(p.stem for p in (Path(run) / "checkpoints").glob("*.pt"))
        raise FileNotFoundError(f"{path}: no such checkpoint; the run has {found or 'none'}")
    return path


def best_checkpoint(run: Path) -> Path:
    """The kept epoch checkpoint whose epoch scored the highest validation top-1 (the later
    epoch on a tie)."""
    scores = {
        int(r["epoch"]): float(r["val_top1"])
        for r in read_metrics(Path(run) / "metrics.jsonl")
        if r.get("kind") == "epoch" and "val_top1" in r
    }
    kept = {
        int(m.group(1)): p
        for p in epoch_checkpoints(Path(run))
        if (m := CHECKPOINT_PATTERN.search(p.name))
    }
    ranked = sorted((scores[e], e) for e in kept if e in scores)
    if not ranked:
        raise FileNotFoundError(
            f"{run}: no kept epoch checkpoint has a validation score in metrics.jsonl ('best')"
        )
    return kept[ranked[-1][1]]


def locate(ref: Path) -> tuple[Path, str]:
    """A run directory or a checkpoint file as (run directory, checkpoint): a directory means
    its last checkpoint; a file's run is the directory holding `checkpoints/` (or the file)."""
    ref = Path(ref)
    if ref.is_dir():
        run, checkpoint = ref, "last"
    elif ref.is_file():
        run = ref.parent.parent if ref.parent.name == "checkpoints" else ref.parent
        checkpoint = str(ref)
    else:
        raise FileNotFoundError(f"{ref}: neither a run directory nor a checkpoint file")
    if not (run / "config.json").is_file():
        raise FileNotFoundError(f"{ref}: no config.json in the run directory {run}")
    return run, checkpoint


def class_names(run: Path, cfg: RunConfig) -> list[str]:
    """RUN/classes.txt, else the run's dataset class list (`data.root` / `data.classes`)."""
    saved = Path(run) / "classes.txt"
    if saved.is_file():
        return read_class_names(saved)
    path = resolve_path(cfg.data.root, cfg.data.classes)
    if not cfg.data.root or not path.is_file():
        raise FileNotFoundError(
            f"no class names: {saved} is missing and the run's class list {path} is not there"
        )
    return read_class_names(path)


def run_config(run: Path) -> RunConfig:
    """RUN/config.json; a missing or malformed one is a `ConfigError` naming the file."""
    path = Path(run) / "config.json"
    if not path.is_file():
        raise ConfigError(f"{run}: not a training run (no config.json)")
    try:
        return load_config(path)
    except ValueError as err:  # malformed JSON, or fields this version does not know
        raise ConfigError(f"{path}: {err}") from err


def load_run(
    run: Path, *, checkpoint: str = "last", device: str | torch.device = "cpu"
) -> LoadedRun:
    """Build the run's model (no ImageNet download or file needed) and load its weights.

    Raises `ConfigError` for a missing or malformed RUN/config.json, `FileNotFoundError` for a
    missing checkpoint or class list, `ValueError` for a checkpoint that does not load.
    """
    run = Path(run)
    cfg = run_config(run)
    classes = class_names(run, cfg)
    num_classes = cfg.model.num_classes or len(classes)
    if num_classes != len(classes):
        raise ValueError(f"{run}: the model has {num_classes} classes, the list {len(classes)}")
    model_cfg = dataclasses.replace(cfg.model, num_classes=num_classes, pretrained=None)
    cfg = dataclasses.replace(cfg, model=model_cfg)
    path = checkpoint_path(run, checkpoint)
    model = build_model(model_cfg)
    load_weights(path, model)
    return LoadedRun(cfg=cfg, model=model.to(device).eval(), classes=classes, checkpoint=path)


def sample_views(video: Path, spec: ClipSpec) -> torch.Tensor:
    """The evaluation views of one video as uint8 (V, 3, T, H, W), V = clips x crops.

    Raises `DecodeError` naming `video` when it is missing, empty or not a readable video.
    """
    try:
        meta = probe(video)
        views: list[torch.Tensor] = []
        for k in range(spec.num_clips):
            idx = frame_indices(meta.num_frames, spec, rng=None, clip_index=k)
            frames = decode_frames(video, idx, meta=meta)
            # Evaluation transforms are deterministic; make_clip only takes the generator along.
            views.extend(make_clip(frames, spec, train=False, rng=np.random.default_rng(0)))
    except DecodeError as err:
        # The decoder's reasons ("zero-byte file", "no video stream") do not name the file.
        raise DecodeError(f"{video}: {err}") from err
    return torch.stack(views)


@torch.inference_mode()
def view_probabilities(model: nn.Module, views: torch.Tensor, *, in_channels: int) -> torch.Tensor:
    """Softmax of every view's logits, averaged over the views: (K,) summing to 1."""
    mean, std = input_normalization(in_channels)
    device = next(model.parameters()).device
    probs = []
    for chunk in views.split(VIEWS_PER_FORWARD):
        clips = normalize(chunk.to(device), mean=mean, std=std)
        probs.append(model(clips).float().softmax(dim=1))
    return torch.cat(probs).mean(dim=0).cpu()


def predict(
    video: Path,
    *,
    run: Path,
    checkpoint: str = "last",
    topk: int = 5,
    num_clips: int | None = None,
    num_crops: int | None = None,
    device: str | torch.device = "cpu",
) -> list[tuple[str, float]]:
    """The `topk` most probable classes of `video` as (name, probability), best first.

    `num_clips` / `num_crops` override the run's `data.eval_clip` (crops: 1 centre or 3).
    """
    loaded = load_run(run, checkpoint=checkpoint, device=device)
    if loaded.cfg.model.in_channels != 3:
        raise ValueError(
            f"{run}: a {loaded.cfg.model.in_channels}-channel model takes no RGB video"
        )
    spec = loaded.cfg.data.eval_clip
    spec = dataclasses.replace(
        spec, num_clips=num_clips or spec.num_clips, num_crops=num_crops or spec.num_crops
    )
    views = sample_views(Path(video), spec)
    probs = view_probabilities(loaded.model, views, in_channels=3)
    top = probs.topk(min(topk, probs.numel()))
    return [
        (loaded.classes[i], float(p)) for p, i in zip(top.values, top.indices.tolist(), strict=True)
    ]


def predictions_as_dict(video: Path, predictions: list[tuple[str, float]]) -> dict[str, Any]:
    """JSON-ready: {"video": path, "predictions": [{"label": name, "probability": p}, ...]}."""
    return {
        "video": str(video),
        "predictions": [{"label": name, "probability": p} for name, p in predictions],
    }


def format_predictions(predictions: list[tuple[str, float]]) -> str:
    return "\n".join(f"{p:7.2%}  {name}" for name, p in predictions)
