"""A tiny demo dataset shared by the training tests (real H.264 files, made once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidscale.data.synthetic import write_synthetic_dataset


@pytest.fixture(scope="session")
def tiny_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny_demo")
    write_synthetic_dataset(root, seed=1, train_per_class=2, val_per_class=1, size=32, num_frames=8)
    return root


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
