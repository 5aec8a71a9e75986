"""What commands print: `--json` keeps stdout for one JSON document (progress, and what child
processes print, go to stderr), and `vidscale eval` reads as a table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vidscale.cli import main
from vidscale.cli.eval_format import format_eval, format_two_stream
from vidscale.cli.output import print_json, progress_to_stderr
from vidscale.data.clip import ClipSpec
from vidscale.scoring.evaluate import EvalResult
from vidscale.train.evaluation.eval_run import Views, summarize


def test_json_mode_sends_progress_and_child_output_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with progress_to_stderr(True):
        print("progress line")
        subprocess.run([sys.executable, "-c", "print('child line')"], check=True)
    print_json({"path": Path("a/b"), "rows": (1, 2)})
    out, err = capfd.readouterr()
    assert json.loads(out) == {"path": "a/b", "rows": [1, 2]}
    assert "progress line" in err and "child line" in err
    with progress_to_stderr(False):
        print("for a person")
    assert capfd.readouterr().out == "for a person\n"


def test_models_and_schedule_print_lines_or_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    names = capsys.readouterr().out.split()
    assert main(["models", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == names
    argv = ["schedule", "demo_tsm_r18_8f_b32_e12", "--dataset-size", "1536"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (
        doc["epochs"] == len(doc["rows"]) == 12
        and doc["phases"][0]["steps_per_epoch"] == 1536 // 32
    )


def eval_report() -> dict:
    results = [
        EvalResult(40.0, 90.0, 1.5, 24, [], [("v/bad.mp4", "unreadable")], 25),
        EvalResult(50.0, 95.0, 1.25, 24, [], [], 25),
    ]
    checkpoints = [Path("epoch_0009.pt"), Path("epoch_0010.pt")]
    spec = ClipSpec(frames=8, crop_size=112)
    return summarize(checkpoints, results, spec, Views(num_clips=2), precision="bf16")


def test_eval_prints_a_table_of_checkpoints_and_the_mean() -> None:
    text = format_eval(eval_report())
    lines = text.splitlines()
    assert lines[1].split() == ["epoch_0009.pt", "40.00", "90.00", "1.5000", "24"]
    assert "top-1 45.00 ± 7.07, top-5 92.50 ± 3.54 over 2 checkpoint(s)" in text
    assert "24 of 25 validation videos; unreadable, left out: v/bad.mp4" in text
    assert "views: 2 clip(s) x 1 crop(s) of 112 px" in text
    assert "scores computed in bf16 (--precision)" in text


def test_two_stream_eval_prints_each_stream_and_the_fusion() -> None:
    result = {
        "checkpoints": {"rgb": "r/last.pt", "flow": "f/last.pt"},
        "weights": {"rgb": 1.0, "flow": 2.0},
        "top1": 60.0,
        "top5": 99.0,
        "stream_top1": {"rgb": 50.0, "flow": 40.0},
        "gain_over_best_stream": 10.0,
        "videos": 20,
        "unreadable": [],
        "only_in": {"rgb": ["a", "b"]},
        "precision": "fp32",
    }
    lines = format_two_stream(result).splitlines()
    assert "scores computed in fp32 (--precision)" in lines
    assert lines[1].split() == ["rgb", "1", "50.00", "r/last.pt"]
    assert lines[3].split()[:2] == ["fused", "60.00"] and "+10.00 over the best" in lines[3]
    assert lines[-1] == "in one stream only, left out: rgb: 2"
