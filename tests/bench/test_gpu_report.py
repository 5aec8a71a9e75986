"""The GPU acceptance run's report on hand-made step results: targets met and missed, and the
run's verdict from the steps and the CUDA tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vidscale.bench.compute.throughput import (
    FillTrial,
    ThroughputConfig,
    ThroughputResult,
    ThroughputRow,
)
from vidscale.bench.data.shard_train import ShardTrainConfig, ShardTrainResult
from vidscale.bench.gpu_report import GpuReport, collect, environment, format_summary
from vidscale.bench.results import HostInfo

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.a" name="test_one"/>
{second}
</testsuite></testsuites>"""
SKIPPED = '<testcase classname="tests.b" name="test_two"><skipped message="needs a CUDA device"/></testcase>'


HOST = HostInfo("cuda:0", "NVIDIA H200", 16, 16, True, "2.5.0", 0.5)


def row(model: str, clips: float, *, compiled: bool = False, batch: int = 64) -> ThroughputRow:
    step_s = batch / clips
    flops = 3 * 10**10
    return ThroughputRow(
        model=model,
        compiled=compiled,
        setting="bf16+cl",
        batch=batch,
        input="8x3x224x224",
        train_flops_per_clip=flops,
        warmup_s=1.0,
        step_s=step_s,
        clips_per_s=clips,
        train_flops_per_s=flops * clips,
        mfu=0.4,
        peak_memory_bytes=2**30,
        fill_trials=(FillTrial(batch, True), FillTrial(2 * batch, False)),
    )


def shard_train(clips: float = 440.0, wait: float = 0.08) -> ShardTrainResult:
    settings = ShardTrainConfig(root=Path("/work/prepared"), batch=64, workers=15)
    return ShardTrainResult(
        hardware=HOST,
        settings=settings,
        videos=32,
        clips_per_s=clips,
        step_s=64 / clips,
        data_wait_fraction=wait,
        worker_cpu_s_per_clip=0.01,
        worker_cores_busy=4.4,
        main_cores_busy=1.0,
    )


def work_dir(
    tmp_path: Path,
    *,
    steps: str,
    second_test: str = "<testcase classname='tests.b' name='test_two'/>",
) -> Path:
    (tmp_path / "steps.tsv").write_text(steps)
    (tmp_path / "tests.xml").write_text(JUNIT.format(second=second_test))
    rows = (
        row("tsm_resnet50", 500.0),
        row("tsm_resnet50", 550.0, compiled=True),
        row("tsn_resnet50", 505.0),
        row("i3d_resnet50_3x1x1", 200.0),
        row("i3d_resnet50_3x3x3", 250.0),
        row("slowfast_resnet50_8x8", 300.0),
    )
    throughput = ThroughputResult(HOST, ThroughputConfig(), 7e14, rows)
    (tmp_path / "throughput.json").write_text(json.dumps(throughput.to_dict()))
    (tmp_path / "shards.json").write_text(json.dumps(shard_train().to_dict()))
    return tmp_path


ALL_OK = "".join(f"{s}\t0\t10\t60\n" for s in ("setup", "tests", "throughput", "shards", "profile"))


def by_name(report: GpuReport) -> dict[str, Mapping[str, Any]]:
    return {t["name"]: t for t in report.targets}


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
    assert results.passed, results.problems  # missed targets are findings, not failures
    summary = format_summary(results)
    assert "**missed**" in summary and "| tsm_resnet50 | compiled | 64 |" in summary


def test_a_failed_or_timed_out_step_or_a_skipped_cuda_test_fails_the_run(tmp_path: Path) -> None:
    steps = ALL_OK.replace("throughput\t0", "throughput\t124").replace("shards\t0", "shards\t1")
    results = collect(
        work_dir(tmp_path, steps=steps, second_test=SKIPPED), environment={}, dry_run=False
    )
    assert not results.passed
    assert results.problems == (
        "step throughput: timed out",
        "step shards: failed (exit 1)",
        "CUDA tests skipped: tests.b::test_two",
    )
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
    assert results.problems == ("step throughput: timed out",)
    assert by_name(results)["TSM-R50 training clips/s (synthetic, best)"]["value"] == 500.0
    summary = format_summary(results)
    assert "(partial: the step stopped before its end):" in summary
    assert "| tsm_resnet50 | eager | 64 |" in summary


def test_a_dry_run_expects_every_cuda_test_skipped_with_a_reason(tmp_path: Path) -> None:
    one_ran = collect(work_dir(tmp_path, steps=ALL_OK), environment={}, dry_run=True)
    assert one_ran.problems == ("dry run: a CUDA test ran on the CPU instead of skipping",)
    (tmp_path / "tests.xml").write_text(
        JUNIT.format(second=SKIPPED).replace(
            '<testcase classname="tests.a" name="test_one"/>',
            '<testcase classname="tests.a" name="test_one"><skipped message="no GPU"/></testcase>',
        )
    )
    assert collect(tmp_path, environment={}, dry_run=True).passed


def test_missing_results_are_reported_not_guessed(tmp_path: Path) -> None:
    results = collect(tmp_path, environment={}, dry_run=False)
    assert not results.passed
    assert "step setup: missing" in results.problems
    assert "no CUDA tests ran (tests.xml missing or empty)" in results.problems
    assert all(t["met"] is None for t in results.targets)
    assert "not measured" in format_summary(results)


def test_the_merged_json_holds_each_step_json_as_written(tmp_path: Path) -> None:
    work = work_dir(tmp_path, steps=ALL_OK)
    merged = collect(work, environment={"device": "cpu"}, dry_run=False).to_dict()
    assert list(merged) == [
        "environment",
        "dry_run",
        "steps",
        "tests",
        "throughput",
        "shards",
        "profile",
        "targets",
        "problems",
        "passed",
    ]
    for step, name in (("throughput", "throughput.json"), ("shards", "shards.json")):
        assert merged[step] == json.loads((work / name).read_text())
    assert merged["profile"] is None and merged["passed"] is True
    assert json.loads(json.dumps(merged)) == merged


def test_a_step_json_missing_a_key_is_a_problem_naming_the_file_and_the_key(
    tmp_path: Path,
) -> None:
    work = work_dir(tmp_path, steps=ALL_OK)
    shards = json.loads((work / "shards.json").read_text())
    del shards["data_wait_fraction"]
    (work / "shards.json").write_text(json.dumps(shards))
    results = collect(work, environment={}, dry_run=False)
    (problem,) = results.problems
    assert problem.startswith(f"step shards: {work / 'shards.json'}: ")
    assert "no 'data_wait_fraction'" in problem and "\n" not in problem
    assert results.results.shards is None
    assert by_name(results)["data wait from shards"]["value"] is None


def test_the_environment_names_torch_cuda_and_cudnn_in_the_summary(tmp_path: Path) -> None:
    env = environment("cpu")
    assert {"torch", "cuda", "cudnn"} <= env.keys()
    work = work_dir(tmp_path, steps=ALL_OK)
    summary = format_summary(collect(work, environment={**env, "cudnn": 91002}, dry_run=False))
    assert f"torch {env['torch']}, CUDA {env['cuda']}, cuDNN 91002" in summary
