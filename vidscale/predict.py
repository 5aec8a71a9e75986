"""`vidscale predict RUN VIDEO`: the top-k classes of one video from a trained run.

The video is sampled the way the run evaluates (its saved `data.eval_clip`: frames, uniform or
dense sampling, short side, crop, RGB or optical flow computed from the video as the run's data
was), with `num_clips` clips along time x `num_crops` spatial crops if asked, by the evaluator's
own sampling function; the views are averaged as the evaluator averages them (the TSM paper's
test protocol, §4.1: "sample 10 clips per video and calculate the average prediction"), so a
video's probabilities here equal its scores in `evaluate`. Two runs (an RGB and a flow stream)
give the two-stream late fusion. `RUN`
may also be a checkpoint file inside a run (`locate`). The model runs on the CPU by default,
so a prediction needs neither a GPU nor the training dataset: the class names come from
`RUN/classes.txt`, written by training (older runs: the class list under `data.root`). Scores
are computed in fp32 unless bf16 is asked for (`precision`), as evaluation computes them
(`scoring.precision`), whatever the run trained in.

A multi-label run (`data.multi_label`) gives each class an independent sigmoid probability (its
views combined by the run's `data.eval_aggregate`, as evaluation combines them): the classes
present are those at `PRESENT_AT` or above, and the top-k are ranked by probability; they do
not sum to one.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vidscale.config import Precision, RunConfig
from vidscale.data.clip import ClipSpec
from vidscale.data.clip import sample_views as clip_views
from vidscale.data.inputs import ModelInput
from vidscale.data.media.decode import DecodeError
from vidscale.data.sources import FlowSettings, file_source
from vidscale.errors import InputError
from vidscale.models.registry import build_model
from vidscale.run.checkpoint import load_weights
from vidscale.run.ref import checkpoint_path, class_names, run_config
from vidscale.scoring.average_precision import ViewAggregation
from vidscale.scoring.evaluate import Average, as_probabilities, video_scores
from vidscale.scoring.precision import FP32, Arithmetic, announce, scoring_arithmetic

VIEWS_PER_FORWARD = 8  # views run through the model at once (bounds activation memory)
PRESENT_AT = 0.5  # multi-label: a class is predicted present at this probability or above


@dataclass(frozen=True)
class LoadedRun:
    """A run's resolved config, its model in eval mode with checkpoint weights, class names."""

    cfg: RunConfig
    model: nn.Module
    classes: list[str]
    checkpoint: Path


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
        raise InputError(f"{run}: the model has {num_classes} classes, the list {len(classes)}")
    model_cfg = dataclasses.replace(cfg.model, num_classes=num_classes, pretrained=None)
    cfg = dataclasses.replace(cfg, model=model_cfg)
    path = checkpoint_path(run, checkpoint)
    model = build_model(model_cfg)
    load_weights(path, model)
    return LoadedRun(cfg=cfg, model=model.to(device).eval(), classes=classes, checkpoint=path)


def sample_views(video: Path, spec: ClipSpec, *, flow: FlowSettings | None = None) -> torch.Tensor:
    """The evaluation views of one video as uint8 (V, C, T, H, W), V = clips x crops, sampled
    by the evaluator's path (`data.clip.sample_views`).

    Raises `DecodeError` naming `video` when it is missing, empty or not a readable video.
    """
    try:
        source = file_source(video, spec, flow or FlowSettings())
        # Evaluation is deterministic: the generator is only carried along.
        views = clip_views(source, spec, train=False, rng=np.random.default_rng(0))
    except DecodeError as err:
        # The decoder's reasons ("zero-byte file", "no video stream") do not name the file.
        raise DecodeError(f"{video}: {err}") from err
    return views if views.ndim == 5 else views[None]


@torch.inference_mode()
def view_probabilities(
    model: nn.Module,
    views: torch.Tensor,
    *,
    model_input: ModelInput,
    average: Average = "logits",
    multi_label: ViewAggregation | None = None,
    arithmetic: Arithmetic = FP32,
) -> torch.Tensor:
    """One video's class probabilities (K,) from its views (V, C, T, H, W), averaged as the
    evaluator averages them (`scoring.evaluate.video_scores`: the mean of the views' logits, or
    of their probabilities; for `multi_label`, the views' sigmoid probabilities combined by
    that rule) in `arithmetic` (fp32 unless asked), so predict and evaluation at the same
    precision score a video identically."""
    device = next(model.parameters()).device
    scores = video_scores(
        model,
        views[None].to(device),
        prepare=model_input.normalize,
        autocast=arithmetic.autocast(),
        average=average,
        views_per_forward=VIEWS_PER_FORWARD,
        multi_label=multi_label,
    )
    probabilities = multi_label is not None or (views.shape[0] > 1 and average == "softmax")
    return as_probabilities(scores, probabilities=probabilities)[0].float().cpu()


def run_probabilities(
    video: Path,
    loaded: LoadedRun,
    *,
    num_clips: int | None = None,
    num_crops: int | None = None,
    average: Average = "logits",
    arithmetic: Arithmetic = FP32,
) -> torch.Tensor:
    """`video`'s class probabilities under one run, from the run's evaluation views
    (`num_clips` / `num_crops` override them), computed in `arithmetic`."""
    spec = loaded.cfg.data.eval_clip
    spec = dataclasses.replace(
        spec, num_clips=num_clips or spec.num_clips, num_crops=num_crops or spec.num_crops
    )
    views = sample_views(Path(video), spec, flow=loaded.cfg.data.flow)
    data = loaded.cfg.data
    return view_probabilities(
        loaded.model,
        views,
        model_input=ModelInput.of(spec, data),
        average=average,
        multi_label=data.eval_aggregate if data.multi_label else None,
        arithmetic=arithmetic,
    )


@dataclass(frozen=True)
class Prediction:
    """One video's prediction: the `top` classes by probability as (name, probability), best
    first; for a `multi_label` run also the classes `present` (probability >= `PRESENT_AT`),
    best first. Multi-label probabilities are independent sigmoids, not a distribution.
    `precision`: the arithmetic the probabilities were computed in (`scoring.precision`)."""

    top: list[tuple[str, float]]
    multi_label: bool = False
    present: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    precision: Precision = "fp32"


def predict(
    video: Path,
    *,
    run: Path,
    checkpoint: str = "last",
    topk: int = 5,
    num_clips: int | None = None,
    num_crops: int | None = None,
    device: str | torch.device = "cpu",
    flow_run: Path | None = None,
    flow_checkpoint: str = "last",
    weights: tuple[float, float] = (1.0, 1.0),
    precision: Precision = "fp32",
) -> list[tuple[str, float]]:
    """The `topk` most probable classes of `video` as (name, probability), best first
    (`predict_video`'s `top`)."""
    return predict_video(
        video,
        run=run,
        checkpoint=checkpoint,
        topk=topk,
        num_clips=num_clips,
        num_crops=num_crops,
        device=device,
        flow_run=flow_run,
        flow_checkpoint=flow_checkpoint,
        weights=weights,
        precision=precision,
    ).top


def predict_video(
    video: Path,
    *,
    run: Path,
    checkpoint: str = "last",
    topk: int = 5,
    num_clips: int | None = None,
    num_crops: int | None = None,
    device: str | torch.device = "cpu",
    flow_run: Path | None = None,
    flow_checkpoint: str = "last",
    weights: tuple[float, float] = (1.0, 1.0),
    precision: Precision = "fp32",
) -> Prediction:
    """`video`'s prediction under `run`.

    `num_clips` / `num_crops` override the runs' `data.eval_clip` (crops: 1 centre or 3). With
    `flow_run`, the prediction is the two-stream late fusion: the `weights`-weighted mean of
    `run`'s and `flow_run`'s probabilities (the flow computed from the video as the flow run's
    data was); both runs must have the same classes and both be multi-label or neither. Every
    probability is computed in `precision` (fp32 unless asked: `scoring.precision`).
    """
    arithmetic = scoring_arithmetic(precision, device)
    announce(arithmetic)
    views = functools.partial(
        run_probabilities, video, num_clips=num_clips, num_crops=num_crops, arithmetic=arithmetic
    )
    loaded = load_run(run, checkpoint=checkpoint, device=device)
    probs = views(loaded)
    multi_label = loaded.cfg.data.multi_label
    if flow_run is not None:
        other = load_run(flow_run, checkpoint=flow_checkpoint, device=device)
        if other.classes != loaded.classes:
            raise InputError(f"{run} and {flow_run} have different class lists")
        if other.cfg.data.multi_label != multi_label:
            raise InputError(f"{run} and {flow_run}: one is multi-label, the other not")
        second = views(other)
        probs = (weights[0] * probs + weights[1] * second) / sum(weights)
    order = probs.argsort(descending=True, stable=True).tolist()
    ranked = [(loaded.classes[i], float(probs[i])) for i in order]
    present = [(name, p) for name, p in ranked if p >= PRESENT_AT] if multi_label else []
    return Prediction(ranked[:topk], multi_label, present, precision)


def predictions_as_dict(
    video: Path, predictions: list[tuple[str, float]] | Prediction
) -> dict[str, Any]:
    """JSON-ready: {"video": path, "predictions": [{"label": name, "probability": p}, ...],
    "precision": its arithmetic}; a multi-label `Prediction` adds `"multi_label": true`,
    `"present_at"` and `"present"` (the classes at or above it, in the same form). A plain
    list is `predict`'s default fp32 output."""
    pred = predictions if isinstance(predictions, Prediction) else Prediction(predictions)
    out: dict[str, Any] = {
        "video": str(video),
        "predictions": [{"label": name, "probability": p} for name, p in pred.top],
        "precision": pred.precision,
    }
    if pred.multi_label:
        out["multi_label"] = True
        out["present_at"] = PRESENT_AT
        out["present"] = [{"label": name, "probability": p} for name, p in pred.present]
    return out


def format_predictions(predictions: list[tuple[str, float]] | Prediction) -> str:
    """One line per top class; a multi-label prediction first names the classes present."""
    pred = predictions if isinstance(predictions, Prediction) else Prediction(predictions)
    lines = [f"{p:7.2%}  {name}" for name, p in pred.top]
    if not pred.multi_label:
        return "\n".join(lines)
    names = ", ".join(name for name, _ in pred.present) or "none"
    head = f"present (independent probabilities >= {PRESENT_AT:g}): {names}"
    return "\n".join([head, "top classes by probability:", *lines])
