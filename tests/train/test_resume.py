"""Checkpoint -> resume gives the same next losses as an uninterrupted run (CPU, deterministic)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.config import apply_overrides
from vidscale.distributed.env import init_distributed
from vidscale.recipes import get_recipe
from vidscale.run.metrics import read_metrics
from vidscale.train import loop


def config(root: Path, workers: int = 0):
    cfg = get_recipe("demo_tsm_r18_8f_b32_e12")
    overrides = ["train.epochs=2", "train.checkpoint_every_steps=1", f"data.workers={workers}"]
    return apply_overrides(cfg, [*tiny_overrides(root), *overrides])


def train_losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


# workers=1: the loaders' workers persist across epochs and must follow the resume position.
@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 1])
def test_resume_mid_epoch_matches_uninterrupted_run(
    tiny_demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    cfg = config(tiny_demo, workers)
    env = init_distributed("cpu")
    full = loop.train(cfg, run_dir=tmp_path / "full")
    assert multiprocessing.active_children() == []  # train() ended its loaders' workers
    reference = train_losses(tmp_path / "full")
    steps_per_epoch = len(reference) // 2
    assert steps_per_epoch >= 2

    real_step = loop.train_step
    calls = {"n": 0}

    def interrupted_step(*args, **kwargs):  # stop in the middle of the second epoch
        if calls["n"] == steps_per_epoch + 1:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", interrupted_step)
    with pytest.raises(KeyboardInterrupt):
        loop.Trainer(cfg, tmp_path / "cut", env, resume="never").run()
    monkeypatch.setattr(loop, "train_step", real_step)
    resumed = loop.Trainer(cfg, tmp_path / "cut", env, resume="must").run()

    assert train_losses(tmp_path / "cut") == reference
    assert resumed["val_top1"] == full["val_top1"]
    assert resumed["train_steps"] == full["train_steps"]
