"""Small, fast training runs for the tests: the overrides that make any recipe tiny."""

from __future__ import annotations

from pathlib import Path


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
