"""`bench throughput`, `bench profile` and `bench shard-train` on the CPU with tiny shapes: the
same code paths the GPU acceptance run takes, their JSON fields, and one-line errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from vidscale.bench.compute import throughput
from vidscale.bench.compute.profile import ProfileResult, idle_gaps, self_times
from vidscale.bench.compute.throughput import (
    FillTrial,
    ThroughputConfig,
    ThroughputResult,
    fill_batch,
)
from vidscale.errors import InputError

TINY = ThroughputConfig(
    models=("tsm_resnet18",),
    setting="fp32",
    compile=(False, True),
    compile_backend="eager",
    batch=1,
    size=32,
    frames=4,
    num_classes=5,
    warmup=1,
    steps=1,
    peak_size=64,
)


def vidscale(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vidscale", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_fill_batch_doubles_until_out_of_memory_and_keeps_the_last_that_fit() -> None:
    def run(batch: int) -> None:
        if batch > 8:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    assert fill_batch(run, start=2, cap=64) == (
        8,
        [FillTrial(2, True), FillTrial(4, True), FillTrial(8, True), FillTrial(16, False)],
    )
    assert fill_batch(lambda b: None, start=3, cap=12)[0] == 12  # the cap stops it
    with pytest.raises(InputError, match="--batch 16 does not fit"):
        fill_batch(run, start=16, cap=64)
    with pytest.raises(RuntimeError, match="shape"):  # not memory: raised as it is
        fill_batch(lambda b: (_ for _ in ()).throw(RuntimeError("shape mismatch")), start=1, cap=4)


@pytest.mark.slow
def test_throughput_eager_and_compiled_rows(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    cfg = replace(TINY, fill=True, max_batch=2)
    result = throughput.run(cfg, out_json=out, device="cpu")
    assert json.loads(out.read_text()) == result.to_dict()
    assert ThroughputResult.read(out) == result
    assert result.complete and result.settings == cfg
    eager, compiled = result.rows
    assert (eager.compiled, compiled.compiled) == (False, True)
    assert eager.batch == compiled.batch == 2
    assert eager.fill_trials == (FillTrial(1, True), FillTrial(2, True))
    for row in result.rows:
        assert row.input == "4x3x32x32" and row.train_flops_per_clip > 0
        assert math.isclose(row.clips_per_s, row.batch / row.step_s)
        assert math.isclose(row.mfu, row.train_flops_per_s / result.peak_flops_per_s)
        assert row.warmup_s > 0 and row.peak_memory_bytes is None  # no CUDA memory on CPU
        assert row.steps_applied == cfg.warmup + cfg.steps  # every step trained


@pytest.mark.slow
def test_a_throughput_run_stopped_early_keeps_every_eager_row_measured(tmp_path: Path) -> None:
    """Eager rows of every model come before any compiled one, and the JSON is rewritten after
    each: here the first compiled row fails (a backend torch does not know), as a time limit
    would stop it, and the file holds both models' eager rows, marked incomplete."""
    out = tmp_path / "t.json"
    cfg = replace(TINY, models=("tsm_resnet18", "tsn_resnet18"), compile_backend="no_such")
    with pytest.raises(Exception, match="no_such"):
        throughput.run(cfg, out_json=out, device="cpu")
    kept = ThroughputResult.read(out)
    assert not kept.complete
    rows = [(r.model, r.compiled) for r in kept.rows]
    assert rows == [("tsm_resnet18", False), ("tsn_resnet18", False)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope_model",), "unknown model 'nope_model'"),
        (("tsm_resnet18", "--compile-only", "tsn_resnet18"), "not among the models"),
        (("tsm_resnet18", "--size", "32", "--frames", "1", "--batch", "1"), "cannot train"),
        (("tsm_resnet18", "--fast-path", "fp16"), "invalid choice"),
    ],
)
def test_throughput_bad_arguments_are_one_line_errors(args: tuple[str, ...], message: str) -> None:
    done = vidscale("bench", "throughput", *args, "--device", "cpu")
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr


def test_self_times_subtract_nested_calls_and_gaps_count_idle_time() -> None:
    spans = [
        {"name": "outer", "ts": 0, "dur": 10, "tid": 1},
        {"name": "inner", "ts": 2, "dur": 3, "tid": 1},
        {"name": "inner", "ts": 6, "dur": 2, "tid": 1},
        {"name": "late", "ts": 14, "dur": 6, "tid": 1},
    ]
    assert self_times(spans) == [5.0, 3.0, 2.0, 6.0]
    gaps = idle_gaps(spans)
    assert (gaps["span_us"], gaps["busy_us"], gaps["gaps"], gaps["mean_gap_us"]) == (20, 16, 1, 4)
    assert gaps["idle_share"] == pytest.approx(0.2)


@pytest.mark.slow
def test_profile_on_the_cpu_lists_operators_shares_and_gaps(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    done = vidscale(
        "bench", "profile", "tsm_resnet18", "--device", "cpu", "--fast-path", "fp32",
        "--batch", "2", "--size", "32", "--frames", "4", "--warmup", "0", "--topk", "5",
        "--out-json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = ProfileResult.read(out)
    assert result.complete and result.to_dict() == json.loads(out.read_text())
    (m,) = result.models
    assert m.timeline == "cpu operators" and len(m.top) == 5
    assert any(t.kind == "matmul/conv" and "conv" in t.name for t in m.top)
    assert m.matmul_conv_share + m.memory_bound_share == pytest.approx(1)
    assert 0 < m.matmul_conv_share < 1 and 0 <= m.idle_share < 1
    assert sum(t.share for t in m.top) <= 1 + 1e-9


def test_profile_and_shard_train_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    done = vidscale("bench", "profile", "nope_model", "--device", "cpu")
    assert done.returncode == 2 and "unknown model 'nope_model'" in done.stderr
    done = vidscale("bench", "shard-train", str(tmp_path), "--device", "cpu", "--size", "32")
    assert done.returncode == 2 and "not a prepared directory" in done.stderr
    done = vidscale("bench", "shard-train", str(tmp_path / "absent"), "--device", "cpu")
    assert done.returncode == 2 and "is not a directory" in done.stderr
    assert "Traceback" not in done.stderr
