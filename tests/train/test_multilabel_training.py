"""Multi-label runs end to end on a tiny multi-label demo: training with binary cross-entropy on
1 and 2 real processes, mAP in every record, the 2-process evaluation equal to a 1-process
evaluation of the same checkpoint, and eval / predict / export of the run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.tiny_run import tiny_overrides
from vidscale.cli import main
from vidscale.config import apply_overrides
from vidscale.data.synthetic.multilabel import MULTI_LABEL_CLASSES, write_multilabel_dataset
from vidscale.predict import PRESENT_AT, predict_video
from vidscale.recipes import get_recipe
from vidscale.run.metrics import read_metrics
from vidscale.run.ref import best_checkpoint
from vidscale.train import loop
from vidscale.train.evaluation.eval_run import evaluate_run

RECIPE = "demo_tsm_r18_multilabel_8f_b32_e10"
CLASSES = len(MULTI_LABEL_CLASSES)


def overrides(root: Path) -> list[str]:
    return [
        *tiny_overrides(root),
        "train.epochs=2",
        "train.amp=off",  # no fast-path probe: the same float32 model in every evaluation
        "train.channels_last=off",
        "data.train_clip.crop_size=32",
        "data.eval_clip.crop_size=32",
        "data.train_clip.short_side=32",
        "data.eval_clip.short_side=32",
        # One video per forward pass: its scores do not depend on which videos share its batch,
        # so a 1-process and a 2-process evaluation score it identically.
        "data.eval_batch_size=1",
    ]


@pytest.fixture(scope="module")
def ml_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ml_demo")
    write_multilabel_dataset(root, seed=2, train_videos=8, val_videos=5, size=32, num_frames=8)
    return root


@pytest.fixture(scope="module")
def ml_run(ml_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("ml_run") / "run"
    loop.train(apply_overrides(get_recipe(RECIPE), overrides(ml_demo)), run_dir=run)
    return run


def test_one_process_trains_on_binary_cross_entropy_and_reports_map(ml_run: Path) -> None:
    records = read_metrics(ml_run / "metrics.jsonl")
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    # BCE of 8 independent sigmoids starts near log 2; a softmax cross-entropy near log 8.
    assert losses and all(math.isfinite(x) and 0.0 < x < 1.0 for x in losses)
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [0.0 <= r["val_map"] <= 1.0 for r in epochs] == [True, True]
    summary = json.loads((ml_run / "summary.json").read_text())
    assert summary["val_map"] == epochs[-1]["val_map"]
    assert summary["val_map_history"] == [r["val_map"] for r in epochs]
    assert summary["best_val_map"] == max(summary["val_map_history"])
    assert 0.2 < summary["chance_map"] < 0.7  # 2-3 of 6 classes a video
    assert summary["val_videos"] == 5
    assert list((ml_run / "tensorboard").iterdir())
    best = max(epochs, key=lambda r: (r["val_map"], r["epoch"]))["epoch"]
    assert best_checkpoint(ml_run).name == f"epoch_{best:04d}.pt"  # by mAP, not hit@1


@pytest.mark.slow
def test_two_processes_evaluate_as_one_process_does(ml_demo: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "vidscale", "train", "--recipe", RECIPE, "--out", str(run)]
    for item in overrides(ml_demo):
        cmd += ["--set", item]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "val mAP" in proc.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2
    losses = [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    assert losses and all(math.isfinite(x) and 0.0 < x < 1.0 for x in losses)
    # The last epoch's checkpoint, evaluated again in this one process: the same mAP, exactly.
    single = evaluate_run(run, last=1)
    assert single["videos"] == summary["val_videos"] == 5
    assert single["checkpoints"][0]["map"] == summary["val_map"]
    assert single["map_chance"] == summary["chance_map"]


def test_eval_command_shows_map_mean_and_std(
    ml_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(ml_run), "--last", "2"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split()[:3] == ["checkpoint", "mAP", "hit@1"]
    assert "mAP " in text and "chance" in text and "mean over views" in text
    assert main(["eval", str(ml_run), "--last", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    history = [r["val_map"] for r in read_metrics(ml_run / "metrics.jsonl") if r["kind"] == "epoch"]
    assert [row["map"] for row in report["checkpoints"]] == pytest.approx(history, abs=1e-9)
    assert report["views"]["aggregate"] == "mean"


def test_predict_gives_independent_probabilities(
    ml_run: Path, ml_demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    video = sorted((ml_demo / "videos" / "val").iterdir())[0]
    pred = predict_video(video, run=ml_run, topk=CLASSES)
    probs = [p for _, p in pred.top]
    assert pred.multi_label and len(probs) == CLASSES
    assert probs == sorted(probs, reverse=True)
    assert abs(sum(probs) - 1.0) > 1e-3  # sigmoids, not a distribution
    assert pred.present == [(n, p) for n, p in pred.top if p >= PRESENT_AT]
    # Late fusion with a second stream: a run fused with itself predicts what it alone does.
    fused = predict_video(video, run=ml_run, topk=CLASSES, flow_run=ml_run, weights=(1.0, 2.0))
    assert [p for _, p in fused.top] == pytest.approx(probs, abs=1e-6)
    assert main(["predict", str(ml_run), str(video), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["multi_label"] is True and out["present_at"] == PRESENT_AT
    assert len(out["predictions"]) == 5


def test_export_records_sigmoid_outputs(ml_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.pt"
    assert main(["export", str(ml_run), "--format", "torchscript", "--out", str(out)]) == 0
    meta = json.loads(out.with_name("model.pt.json").read_text())
    assert meta["multi_label"] is True
    assert "independent sigmoid probabilities" in meta["outputs"]
    assert torch.jit.load(str(out))(torch.zeros(1, 3, 4, 32, 32)).shape == (1, CLASSES)
