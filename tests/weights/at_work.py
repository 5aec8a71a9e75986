"""An imported run at work (helpers of the import tests, no tests of its own): `predict`,
`eval` and `train --set model.init_from=RUN` take it as they take a trained run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.tiny_run import tiny_overrides
from tests.weights.test_mmaction2 import run_cli
from vidscale.predict import load_run, predict

SMALL_EVAL = (
    "--clips", "1", "--crops", "1", "--short-side", "32", "--crop-size", "32",
    "--set", "data.eval_clip.frames=8", "--set", "data.workers=0",
)  # fmt: skip


def import_run(
    capsys: pytest.CaptureFixture[str], src: Path, *, fmt: str, model: str, classes: Path, run: Path
) -> dict[str, object]:
    """`vidscale import-weights ... --json`: its report."""
    code, out, err = run_cli(
        capsys, "import-weights", str(src), "--format", fmt, "--model", model,
        "--classes", str(classes), "--out", str(run), "--json",
    )  # fmt: skip
    assert code == 0, err
    report: dict[str, object] = json.loads(out)
    return report


def check_at_work(
    capsys: pytest.CaptureFixture[str], run: Path, *, data: Path, tmp_path: Path
) -> None:
    """`run` (of `data`'s classes) predicts a video, evaluates on `data` and initialises a
    one-epoch fine-tune on it, each at 8 frames of 32 pixels."""
    names = (data / "classes.txt").read_text().split()
    video = next((data / "videos" / "val").rglob("*.mp4"))
    top = predict(video, run=run, topk=3, num_clips=1, num_crops=1)
    assert len(top) == 3 and all(name in names for name, _ in top)

    code, out, err = run_cli(capsys, "eval", str(run), "--data", str(data), *SMALL_EVAL, "--json")
    assert code == 0, err
    assert 0.0 <= json.loads(out)["checkpoints"][0]["top1"] <= 100.0

    tuned = tmp_path / "tuned"
    sets = [
        *tiny_overrides(data),
        "data.train_clip.frames=8", "data.eval_clip.frames=8", "data.train_clip.crop_size=32",
        "data.eval_clip.crop_size=32", "data.eval_clip.short_side=32", "data.eval_clip.num_clips=1",
        "data.eval_clip.num_crops=1", "train.epochs=1", "train.amp=off",
        "train.channels_last=off", f"model.init_from={run}",
    ]  # fmt: skip
    argv = ["train", "--config", str(run / "config.json"), "--out", str(tuned), "--json"]
    for item in sets:
        argv += ["--set", item]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    summary = json.loads((tuned / "summary.json").read_text())
    assert math.isfinite(summary["val_top1"])
    start = torch.load(tuned / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert set(start) == set(load_run(run).model.state_dict())
