"""Small, fast training runs for the tests: the overrides that make any recipe tiny."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidscale.run.data import load_data
from vidscale.run.ref import resolve_eval_config


def tiny_overrides(root: Path) -> list[str]:
    """Small and fast: 4 frames, batch 4, no workers, no progress bar."""
    return [
        f"data.root={root}",
        "data.batch_size=4",
        "data.workers=0",
        "data.train_clip.frames=4",
        "data.eval_clip.frames=4",
        "train.progress=false",
        "train.log_every=1",
        "train.threads=1",
    ]


def recomputed_top1(run: Path, report: dict[str, Any]) -> float:
    """The top-1 of `report`'s one checkpoint row (`evaluate_run(..., keep_scores=True)`),
    recomputed here from its per-video scores and the labels the run's data lists: a check of
    the evaluator's counting that does not go through it."""
    _, splits = load_data(resolve_eval_config(run))
    labels = {str(getattr(item, "path", None) or item.id): item.label for item in splits.val}
    [row] = report["checkpoints"]
    scores = row["video_scores"]
    assert scores and set(scores) <= set(labels)
    hits = [max(range(len(p)), key=p.__getitem__) == labels[v] for v, p in scores.items()]
    return 100.0 * sum(hits) / len(hits)


def is_share_of(percent: float, videos: int) -> bool:
    """True when `percent` is k of `videos` right for a whole k: what a top-1 or top-5 over
    `videos` videos, each counted once, can be (a count over views, batches or ranks instead
    of videos is not, in general)."""
    right = percent * videos / 100
    return abs(right - round(right)) < 1e-6 and 0 <= round(right) <= videos
