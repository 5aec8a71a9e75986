"""`vidscale plan` in-process: the answers, JSON, the paper figures, one-line errors, and the
inputs of a `vidscale bench scaling` JSON (`--measured`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.planner.test_capacity import (
    MEASURED_MODEL,
    measured_json,
    overwrite,
    scaling_run,
    write_scaling_json,
)
from vidscale.cli import main

__all__ = ["measured_json"]  # the fixture, shared with tests/planner/test_capacity.py


def test_plan_prints_time_efficiency_bottleneck_and_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--model", "tsm_resnet50", "--world-size", "1536", "--hardware", "summit"]
    assert main([*argv, "--epochs", "100", "--epoch-clips", "240000", "--batch-per-gpu", "8"]) == 0
    out = capsys.readouterr().out
    for word in ("time to train", "efficiency", "bottleneck     compute", "12,288"):
        assert word in out


def test_plan_json_and_target_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--target", "15m", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["reached"] and found["plan"]["train_s"] <= 900
    assert main(["plan", "--world-size", str(found["plan"]["gpus"]), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["train_s"] == pytest.approx(found["plan"]["train_s"])


def test_plan_compare_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--compare", "tsm_resnet50,i3d_resnet50_3x3x3", "--world-size", "6,1536"]
    assert main([*argv, "--hardware", "summit", "--grad-dtype", "bf16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith(("tsm_resnet50 ", "i3d_resnet50_3x3x3 ")) for line in lines) == 4


@pytest.mark.slow
def test_paper_figures_are_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    assert main(["plan", "--paper-figures", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Table 3" in text and "Fig. 3c" in text and "Fig. 6" in text
    names = {p.name for p in out.iterdir()}
    assert names == {
        "scaling_paper.json",
        "scaling_table3.png",
        "scaling_fig3c.png",
        "scaling_fig6.png",
    }
    report = json.loads((out / "scaling_paper.json").read_text())
    assert all(abs(row["error"]) <= 0.15 for row in report["table3"])


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--world-size", "0"], "--world-size"),
        (["--world-size", "-6"], "--world-size"),
        (["--world-size", "100"], "--world-size"),
        (["--model", "i3d_resnet50"], "--model"),
        (["--hardware", "cray"], "--hardware"),
        (["--bandwidth-gbps", "-1"], "--bandwidth-gbps"),
        (["--latency-us", "-2"], "--latency-us"),
        (["--target", "soon"], "--target"),
        (["--target", "15m", "--world-size", "48"], "--target"),
        (["--compare", "tsm_resnet50,nope"], "--compare"),
        (["--hardware", "dgx-h100", "--world-size", "8"], "--step-time"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = main(["plan", *argv])
    except SystemExit as stop:  # argparse's own errors
        status = int(stop.code or 0)
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and flag in err and "Traceback" not in err


def test_plan_measured_on_this_machine(
    measured_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--model", MEASURED_MODEL, "--measured", str(measured_json)]
    assert main([*argv, "--world-size", "2", "--hardware", "local"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # a CPU's measurement on CPU processes: no warning
    lines = captured.out.splitlines()
    assert lines[0].startswith(f"{MEASURED_MODEL} on 2 processes of local")
    assert "  batch          2 clips per process -> global batch 4" in lines
    assert "compute 3.000" in captured.out
    overlap = next(line for line in lines if line.startswith("  overlap"))
    assert "measured 87.5%" in overlap and "the overlap model predicts" in overlap
    sources = [line for line in lines if line.startswith("  assumption")]
    for what in ("compute: measured", "data loading: measured", "network: measured"):
        line = next(s for s in sources if what in s)
        assert str(measured_json) in line and "run tsm_resnet50" in line
    assert main([*argv, "--world-size", "2", "--hardware", "local", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["batch_per_gpu"] == 2 and out["compute_s"] == pytest.approx(3.0)
    assert out["measured"]["compute_clip_s"] == pytest.approx(1.5)
    assert out["measured"]["overlap"]["hidden"] == pytest.approx(0.875)


def test_plan_measured_explicit_flags_win_and_a_gpu_preset_warns(
    measured_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "plan",
        "--model",
        MEASURED_MODEL,
        "--measured",
        str(measured_json),
        "--world-size",
        "6",
    ]
    assert main([*argv, "--batch-per-gpu", "8", "--json"]) == 0
    captured = capsys.readouterr()
    (warning,) = captured.err.splitlines()
    assert warning.startswith("vidscale plan: warning:") and "CPU" in warning
    out = json.loads(captured.out)
    assert out["batch_per_gpu"] == 8 and out["compute_s"] == pytest.approx(8 * 1.5)
    assert main([*argv, "--step-time", "0.5", "--data-time", "0.01", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert captured.err == ""  # the file's compute is not used: nothing to warn about
    assert out["batch_per_gpu"] == 8 and out["compute_s"] == pytest.approx(0.5)
    assert sum("not used" in note for note in out["assumptions"]) == 2


def test_plan_measured_compare_reports_the_overlap_once(
    measured_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--measured", str(measured_json), "--hardware", "local", "--world-size", "1,2"]
    assert main([*argv, "--compare", f"{MEASURED_MODEL},tsm_resnet18"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("  overlap") for line in lines) == 1
    assert sum(line.startswith(("tsm_resnet50 ", "tsm_resnet18 ")) for line in lines) == 4


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.with_name("missing.json"), "cannot read it"),
        (lambda p: overwrite(p, "{not json"), "not JSON"),
        (lambda p: overwrite(p, '{"benchmark": "data"}'), "not a `vidscale bench scaling` JSON"),
        (
            lambda p: write_scaling_json(p, [scaling_run(1, model="tsm_resnet18")]),
            "its models: tsm_resnet18",
        ),
        (
            lambda p: write_scaling_json(p, [scaling_run(2, exposed=0.1, in_flight=0.2)]),
            "no 1-process run of tsm_resnet50",
        ),
    ],
)
def test_plan_bad_measured_file_is_one_line(
    measured_json: Path,
    make: Callable[[Path], Path],
    words: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = make(measured_json)
    assert main(["plan", "--measured", str(path), "--hardware", "local"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("vidscale: error: --measured: ") and str(path) in err and words in err
