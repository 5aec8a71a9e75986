"""The GPU acceptance run's report on hand-made step results: targets met and missed, and the
run's verdict from the steps and the CUDA tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vidscale.bench.gpu_report import collect, format_summary

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.a" name="test_one"/>
{second}
</testsuite></testsuites>"""
SKIPPED = '<testcase classname="tests.b" name="test_two"><skipped message="needs a CUDA device"/></testcase>'


def row(model: str, clips: float, *, compiled: bool = False, batch: int = 64) -> dict[str, Any]:
    return {
        "model": model,
        "compiled": compiled,
        "clips_per_s": clips,
        "batch": batch,
        "step_s": batch / clips,
        "mfu": 0.4,
    }


def work_dir(
    tmp_path: Path,
    *,
    steps: str,
    second_test: str = "<testcase classname='tests.b' name='test_two'/>",
) -> Path:
    (tmp_path / "steps.tsv").write_text(steps)
    (tmp_path / "tests.xml").write_text(JUNIT.format(second=second_test))
    rows = [
        row("tsm_resnet50", 500.0),
        row("tsm_resnet50", 550.0, compiled=True),
        row("tsn_resnet50", 505.0),
        row("i3d_resnet50_3x1x1", 200.0),
        row("i3d_resnet50_3x3x3", 250.0),
        row("slowfast_resnet50_8x8", 300.0),
    ]
    throughput = {"settings": {"setting": "bf16+cl"}, "peak_flops_per_s": 7e14, "rows": rows}
    (tmp_path / "throughput.json").write_text(json.dumps(throughput))
    shards = {
        "clips_per_s": 440.0,
        "data_wait_fraction": 0.08,
        "worker_cpu_s_per_clip": 0.01,
        "main_cores_busy": 1.0,
    }
    (tmp_path / "shards.json").write_text(json.dumps(shards))
    return tmp_path


ALL_OK = "".join(f"{s}\t0\t10\t60\n" for s in ("setup", "tests", "throughput", "shards", "profile"))


def by_name(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in results["targets"]}


def test_targets_met_and_missed_are_computed_from_the_rows(tmp_path: Path) -> None:
    results = collect(work_dir(tmp_path, steps=ALL_OK), environment={}, dry_run=False)
    t = by_name(results)
    assert t["TSM-R50 training clips/s (synthetic, best)"] == {
        "name": "TSM-R50 training clips/s (synthetic, best)",
        "value": 550.0,
        "target": ">= 400",
        "met": True,
    }
    assert t["TSM-R50 from shards / synthetic (eager)"]["value"] == 440.0 / 500.0
    assert t["TSM-R50 from shards / synthetic (eager)"]["met"] is False  # 0.88 < 0.90
    assert t["data wait from shards"]["met"] is False  # 8% > 5%
    assert t["TSM/TSN step time (eager)"]["value"] == 505.0 / 500.0
    assert t["TSM/TSN step time (eager)"]["met"] is True
    assert t["TSM vs i3d_resnet50_3x1x1 clips/s (eager)"]["value"] == 2.5
    assert t["TSM vs i3d_resnet50_3x1x1 clips/s (eager)"]["met"] is None  # a reference
    assert t["SlowFast-R50 8x8 training clips/s (best)"]["met"] is False  # 300 < 305.8
    assert t["CPU cores per GPU at the best synthetic rate"]["value"] == 0.01 * 550.0 + 1.0
    assert results["passed"], results["problems"]  # missed targets are findings, not failures
    summary = format_summary(results)
    assert "**missed**" in summary and "| tsm_resnet50 | compiled | 64 |" in summary


def test_a_failed_or_timed_out_step_or_a_skipped_cuda_test_fails_the_run(tmp_path: Path) -> None:
    steps = ALL_OK.replace("throughput\t0", "throughput\t124").replace("shards\t0", "shards\t1")
    results = collect(
        work_dir(tmp_path, steps=steps, second_test=SKIPPED), environment={}, dry_run=False
    )
    assert not results["passed"]
    assert results["problems"] == [
        "step throughput: timed out",
        "step shards: failed (exit 1)",
        "CUDA tests skipped: tests.b::test_two",
    ]
    assert "**failed**" in format_summary(results)


def test_a_throughput_step_stopped_by_its_limit_keeps_its_rows_marked_partial(
    tmp_path: Path,
) -> None:
    work = work_dir(tmp_path, steps=ALL_OK.replace("throughput\t0", "throughput\t124"))
    throughput = json.loads((work / "throughput.json").read_text())
    throughput["complete"] = False
    throughput["rows"] = [r for r in throughput["rows"] if not r["compiled"]]
    (work / "throughput.json").write_text(json.dumps(throughput))
    results = collect(work, environment={}, dry_run=False)
    assert results["problems"] == ["step throughput: timed out"]
    assert by_name(results)["TSM-R50 training clips/s (synthetic, best)"]["value"] == 500.0
    summary = format_summary(results)
    assert "(partial: the step stopped before its end):" in summary
    assert "| tsm_resnet50 | eager | 64 |" in summary


def test_a_dry_run_expects_every_cuda_test_skipped_with_a_reason(tmp_path: Path) -> None:
    one_ran = collect(work_dir(tmp_path, steps=ALL_OK), environment={}, dry_run=True)
    assert one_ran["problems"] == ["dry run: a CUDA test ran on the CPU instead of skipping"]
    (tmp_path / "tests.xml").write_text(
        JUNIT.format(second=SKIPPED).replace(
            '<testcase classname="tests.a" name="test_one"/>',
            '<testcase classname="tests.a" name="test_one"><skipped message="no GPU"/></testcase>',
        )
    )
    assert collect(tmp_path, environment={}, dry_run=True)["passed"]


def test_missing_results_are_reported_not_guessed(tmp_path: Path) -> None:
    results = collect(tmp_path, environment={}, dry_run=False)
    assert not results["passed"]
    assert "step setup: missing" in results["problems"]
    assert "no CUDA tests ran (tests.xml missing or empty)" in results["problems"]
    assert all(t["met"] is None for t in results["targets"])
    assert "not measured" in format_summary(results)
