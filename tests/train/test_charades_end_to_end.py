"""Charades as published, end to end through the command line with no edits: a directory in the
published format (CSVs with action segments, real H.264 videos, a video with no action, an
unreadable and a missing video) -> `vidscale prepare --layout charades` -> `vidscale train` from
the shards (multi-label: binary cross-entropy, mAP) -> `vidscale eval` -> `vidscale predict`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.data.layouts.test_charades_layout import CLASSES, charades  # noqa: F401  (the fixture)
from tests.tiny_run import tiny_overrides
from vidscale.cli import main

RECIPE = "demo_tsm_r18_multilabel_8f_b32_e10"


@pytest.fixture(scope="module")
def prepared(charades: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("charades_prepared") / "prep"
    argv = ["prepare", "--layout", "charades", "--root", str(charades), "--out", str(out)]
    assert main([*argv, "--skip-missing", "--workers", "1", "--no-progress"]) == 0
    return out


def test_prepare_reports_the_unreadable_and_the_missing_video(prepared: Path) -> None:
    manifest = json.loads((prepared / "manifest.json").read_text())
    text = json.dumps(manifest)
    assert "BAD.mp4" in text and "GONE.mp4" in text


def test_charades_trains_evaluates_and_predicts_from_the_command_line(
    charades: Path,  # noqa: F811
    prepared: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = tmp_path / "run"
    sets = [
        *tiny_overrides(prepared),
        "data.source=shards",
        "data.multi_label=true",
        "data.eval_aggregate=max",  # Charades' test: the max over a video's views
        "data.batch_size=1",
        "optim.accumulate=1",
        "train.epochs=2",
        "train.amp=off",
        "train.channels_last=off",
    ]
    argv = ["train", "--recipe", RECIPE, "--out", str(run)]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 0
    summary = json.loads((run / "summary.json").read_text())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    history = [r["val_map"] for r in records if r["kind"] == "epoch"]
    assert summary["val_map"] == history[-1]
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert losses and all(math.isfinite(x) for x in losses)
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2]
    capsys.readouterr()

    assert main(["eval", str(run), "--last", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["views"]["aggregate"] == "max" and len(report["checkpoints"]) == 2
    # the trainer's evaluation of each epoch, scored again by `eval` from its checkpoint
    assert [row["map"] for row in report["checkpoints"]] == pytest.approx(history, abs=1e-6)

    video = charades / "Charades_v1_480" / "V4.mp4"
    assert main(["predict", str(run), str(video), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["multi_label"] is True
    # Independent sigmoid probabilities, one per class of the published class list.
    labels = [p["label"] for p in out["predictions"]]
    assert sorted(labels) == sorted(c.split(" ", 1)[1] for c in CLASSES)  # the published names
    assert all(0.0 < p["probability"] < 1.0 for p in out["predictions"])
    # present: exactly the classes at or above the threshold, each with its own probability
    at = out["present_at"]
    assert out["present"] == [p for p in out["predictions"] if p["probability"] >= at]
