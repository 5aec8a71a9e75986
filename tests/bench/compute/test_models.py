"""`bench models`: Table 1 rows measured on tiny clips, Table 2 against the TSM paper."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import torch

from vidscale.bench.compute import models
from vidscale.bench.compute.model_ratios import add_ratios, comparisons
from vidscale.bench.compute.models import (
    STAGES,
    BenchConfig,
    ModelsConfig,
    check_request,
    table2,
    time_round_robin,
)
from vidscale.bench.compute.models_table import (
    auto_cell,
    format_auto_check,
    format_report,
    format_stage_table,
)
from vidscale.errors import InputError
from vidscale.fastpath.settings import Candidate, candidates
from vidscale.step.applied import NothingTrained

TINY = BenchConfig(
    size=32, frames=2, num_classes=5, warmup=0, repeats=1, peak_size=64, threads=1, probe_repeats=2
)


def test_bench_models_measures_every_model_in_both_modes(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    names = ["tsn_resnet18", "tsm_resnet18"]
    cfg = dataclasses.replace(TINY, modes=("fp32", "fast"))
    threads = torch.get_num_threads()
    config = ModelsConfig(tuple(names), "tsm_resnet18", cfg)
    result = models.run(config, out_json=out, device="cpu")
    assert torch.get_num_threads() == threads  # restored after measuring with 1 thread
    rows = result.rows
    assert [(r["model"], r["mode"]) for r in rows] == [
        (n, m) for m in ("fp32", "fast") for n in names
    ]
    for r in rows:
        for key in ("params", "macs", "compute_per_io", "peak_flops_per_s"):
            assert r[key] > 0, key
        for kind in ("train", "infer"):
            assert r[f"{kind}_clips_per_s"] > 0 and r[f"{kind}_utilization"] > 0
            assert r[f"{kind}_page_faults"] >= 0  # counted on Linux (NaN would fail here)
        assert r["input"] == "2x3x32x32" and r["flops"] == 2 * r["macs"]
        assert r["accuracy"] is None  # left to the user's runs
        assert r["train_steps_applied"] == r["train_steps_run"] > 0  # every step trained
    tsm_fp32, tsm_fast = rows[1], rows[3]
    assert (
        tsm_fp32["train_s_vs_baseline"] == 1.0 and tsm_fast["infer_clips_per_s_vs_baseline"] == 1.0
    )
    assert "train_fast_speedup" in tsm_fast and "train_fast_speedup" not in tsm_fp32
    assert [(c["mode"], c["model"]) for c in result.comparisons] == [
        ("fp32", "tsn_resnet18"),
        ("fast", "tsn_resnet18"),
    ]
    report = json.loads(out.read_text())
    assert report == result.to_dict()
    assert len(report["rows"]) == 4 and report["hardware"]["device"] == "cpu"
    assert report["settings"]["baseline"] == "tsm_resnet18"
    assert report["table2"]["tsm_resnet18"] == [2, 2, 2, 2, None, 2, 2, 2, 1]
    text = format_report(result)
    assert "tsm_resnet18 / tsn_resnet18" in text and "GFLOP/s" in text and "res5" in text
    # The fast rows run what training's "auto" chose at this shape, and say so.
    assert "auto (probe)" in text
    labels = {c.label for c in candidates(torch.device("cpu"), bf16=None, channels_last=None)}
    for r in rows:
        if r["mode"] == "fp32":
            assert "auto_choice" not in r and auto_cell(r) == "-"
            continue
        chosen = Candidate(r["bf16"], r["channels_last"]).label
        assert r["auto_choice"] == chosen
        # 2 probe rounds cannot show a gain: everything but fp32 stops after the first.
        assert set(r["auto_probe"]) == {"fp32"} and set(r["auto_dropped"]) == labels - {"fp32"}
        assert r["auto_speedup"] == r["auto_probe"][chosen]["speedup"]
        assert auto_cell(r).startswith(chosen) and auto_cell(r) in text
        assert r["train_fast_vs_fp32"] > 0 and r["train_fast_vs_fp32_noise"] >= 0
    assert "auto vs fp32, training step" in text


def test_round_robin_rotates_the_order_and_times_every_call() -> None:
    order: list[str] = []
    calls = {k: (lambda k=k: order.append(k)) for k in "abc"}
    times = time_round_robin(calls, warmup=1, repeats=3).seconds
    assert order == list("abcbcacababc")
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t >= 0 for v in times.values() for t in v)


def test_a_dropped_call_is_timed_no_more_and_the_last_one_left_stops() -> None:
    order: list[str] = []
    calls = {k: (lambda k=k: order.append(k)) for k in "abc"}
    seen: list[list[str]] = []

    def drop(so_far: Mapping[str, Sequence[float]]) -> list[str]:
        seen.append(list(so_far))
        return {1: ["c"], 2: ["b"]}.get(len(so_far["a"]), [])

    times = time_round_robin(calls, warmup=1, repeats=5, drop=drop).seconds
    # Warm-up abc, round 1 bca, then c dropped: round 2 over [a, b] starts at 2 mod 2.
    assert order == list("abcbca") + list("ab")
    assert seen == [["a", "b", "c"], ["a", "b"]]  # not asked after the warm-up round
    assert {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2, "c": 1}


def test_settle_calls_run_untimed_right_before_the_timed_ones() -> None:
    order: list[str] = []
    now = [0.0]

    def call(k: str) -> None:
        order.append(k)
        now[0] += 1.0  # every call takes one clock unit

    calls = {k: (lambda k=k: call(k)) for k in "ab"}
    samples = time_round_robin(calls, warmup=0, repeats=2, settle=2, clock=lambda: now[0])
    assert order == list("aaabbbbbbaaa")
    assert samples.seconds == {"a": [1.0, 1.0], "b": [1.0, 1.0]}  # settle calls not counted


def test_page_faults_are_counted_per_timed_call() -> None:
    faults = [0.0]

    def touch(pages: int) -> None:
        faults[0] += pages

    calls = {"small": lambda: touch(3), "big": lambda: touch(40)}
    samples = time_round_robin(
        calls, warmup=1, repeats=2, steps=2, settle=1, faults=lambda: faults[0]
    )
    assert samples.page_faults == {"small": [3.0, 3.0], "big": [40.0, 40.0]}


def test_steps_run_back_to_back_and_a_sample_is_their_mean() -> None:
    order: list[str] = []
    ticks = iter(range(100))
    calls = {k: (lambda k=k: order.append(k)) for k in "ab"}
    times = time_round_robin(
        calls, warmup=0, repeats=1, steps=2, clock=lambda: float(next(ticks) * 10)
    ).seconds
    assert order == list("aabb")
    assert times == {"a": [5.0], "b": [5.0]}  # 10 clock units over 2 steps


def _row(model: str, mode: str, train_s: float, cio: float) -> dict[str, object]:
    return {
        "model": model,
        "mode": mode,
        "params": 10,
        "flops": 100,
        "compute_per_io": cio,
        "train_s": train_s,
        "train_samples_s": [train_s, train_s, train_s],
        "train_clips_per_s": 2 / train_s,
        "train_utilization": 0.1 / train_s,
    }


def test_ratios_to_a_named_baseline_and_fast_over_fp32() -> None:
    rows = add_ratios(
        [
            _row("i3d", "fp32", 4.0, 6.85e3),
            _row("tsm", "fp32", 2.0, 27.4e3),
            _row("i3d", "fast", 2.0, 6.85e3),
            _row("tsm", "fast", 0.5, 27.4e3),
        ],
        baseline="tsm",
    )
    assert rows[0]["train_clips_per_s_vs_baseline"] == pytest.approx(0.5)  # i3d vs tsm
    assert rows[0]["train_s_vs_baseline"] == pytest.approx(2.0)
    assert rows[0]["compute_per_io_vs_baseline"] == pytest.approx(0.25)
    assert rows[2]["train_clips_per_s_vs_baseline"] == pytest.approx(0.25)  # vs tsm fast
    assert rows[3]["train_fast_speedup"] == pytest.approx(4.0)  # tsm fp32 2.0 s / fast 0.5 s
    assert rows[3]["train_fast_vs_fp32"] == pytest.approx(4.0)  # per round, the same here
    assert rows[3]["train_fast_vs_fp32_noise"] == 0.0
    assert rows[1]["train_utilization_vs_baseline"] == pytest.approx(1.0)
    pairs = comparisons(rows, baseline="tsm")
    # TSM over I3D: step time 0.5 (TSM's step is half as long), throughput 2x.
    assert pairs[0] == {
        "mode": "fp32",
        "baseline": "tsm",
        "model": "i3d",
        "train_step_time": pytest.approx(0.5),
        "train_clips_per_s": pytest.approx(2.0),
    }
    assert pairs[1]["train_clips_per_s"] == pytest.approx(4.0)


def test_comparisons_take_the_median_of_per_round_ratios() -> None:
    # The machine slows down over the run: both models take longer each round, TSM 2% more
    # than TSN, except in one disturbed round. The ratio of the medians (1.08) mixes rounds;
    # the median of the per-round ratios stays at 1.02.
    tsn = [1.0, 1.1, 1.6, 1.7, 1.8]
    tsm = [1.02 * t for t in tsn]
    tsm[1], tsn[1] = 1.9, 1.1 * 0.5  # one disturbed round (an outlier pair)
    rows = [
        {"model": "tsm", "mode": "fast", "train_s": 0, "train_samples_s": tsm},
        {"model": "tsn", "mode": "fast", "train_s": 0, "train_samples_s": tsn},
    ]
    (pair,) = comparisons(rows, baseline="tsm")
    assert pair["train_step_time"] == pytest.approx(1.02)
    assert pair["train_clips_per_s"] == pytest.approx(1 / 1.02)


def test_the_auto_column_names_the_choice_and_the_probe_ratio() -> None:
    probe = {
        "fp32": {"seconds": 0.253, "speedup": 1.0, "noise": 0.0},
        "bf16": {"seconds": 0.301, "speedup": 0.84, "noise": 0.03},
        "bf16+cl": {"seconds": 0.358, "speedup": 0.71, "noise": 0.05},
    }
    kept = {"auto_choice": "fp32", "auto_speedup": 1.0, "auto_probe": probe}
    assert auto_cell(kept) == "fp32 (bf16 0.84x)"  # the best rival it kept out
    probe["bf16+cl"]["speedup"] = 1.42
    taken = {"auto_choice": "bf16+cl", "auto_speedup": 1.42, "auto_probe": probe}
    assert auto_cell(taken) == "bf16+cl 1.42x"
    assert auto_cell({"mode": "fp32"}) == "-"


def test_the_auto_check_flags_a_fast_row_slower_than_fp32_beyond_its_noise() -> None:
    def row(model: str, ratio: float, noise: float) -> dict[str, object]:
        return {
            "model": model,
            "auto_choice": "bf16+cl",
            "train_fast_vs_fp32": ratio,
            "train_fast_vs_fp32_noise": noise,
        }

    text = format_auto_check([row("a", 0.97, 0.05), row("b", 0.90, 0.05), {"model": "c"}])
    lines = text.splitlines()
    assert len(lines) == 2  # c has no fast row against an fp32 row
    assert lines[0].endswith(": ok") and "0.97x fp32 (noise 5%)" in lines[0]
    assert lines[1].endswith("SLOWER than fp32 beyond the noise")
    hung = row("d", 1.2, 0.05) | {"auto_left_out": {"bf16": "hung: its turn did not end in 90 s"}}
    assert format_auto_check([hung]).endswith(
        ": ok; bf16 left out of the probe (hung: its turn did not end in 90 s)"
    )


def _request(names: list[str], cfg: BenchConfig, baseline: str | None = None) -> str:
    return check_request(ModelsConfig(tuple(names), baseline, cfg))


def test_requests_that_cannot_work_are_refused_before_measuring() -> None:
    with pytest.raises(InputError, match="unknown model 'tsm_resnet5'"):
        _request(["tsm_resnet5"], TINY)
    with pytest.raises(InputError, match="more than once"):
        _request(["tsm_resnet18", "tsm_resnet18"], TINY)
    with pytest.raises(InputError, match="baseline 'tsn_resnet18'"):
        _request(["tsm_resnet18"], TINY, baseline="tsn_resnet18")
    with pytest.raises(InputError, match="^--repeats: must be >= 1"):
        _request(["tsm_resnet18"], BenchConfig(repeats=0))
    with pytest.raises(InputError, match="^--probe-repeats: must be >= 1"):
        _request(["tsm_resnet18"], BenchConfig(probe_repeats=0))
    # I3D 3x1x1 pools time by 8: two frames cannot pass its pool2.
    with pytest.raises(InputError, match="i3d_resnet50_3x1x1 cannot train on 1x3x2x32x32"):
        _request(["i3d_resnet50_3x1x1"], TINY)
    assert _request(["tsn_resnet18", "tsm_resnet18"], TINY) == "tsn_resnet18"


def test_quick_settings_fit_every_default_model() -> None:
    assert check_request(ModelsConfig(settings=BenchConfig.quick())) == "tsm_resnet50"


def test_table2_matches_the_tsm_paper() -> None:
    table = table2(["i3d_resnet50_3x3x3", "i3d_resnet50_3x1x1", "tsm_resnet50"])
    # TSM paper Table 2: data, conv1, pool1, res2, pool2, res3, res4, res5, global pool.
    assert STAGES[4] == "pool2"
    assert table["i3d_resnet50_3x3x3"] == [16, 16, 8, 8, None, 4, 2, 1, 1]
    assert table["i3d_resnet50_3x1x1"] == [32, 16, 8, 8, 4, 4, 4, 4, 1]
    assert table["tsm_resnet50"] == [8, 8, 8, 8, None, 8, 8, 8, 1]
    lines = format_stage_table(table).splitlines()
    assert lines[3].split() == ["tsm_resnet50", "8", "8", "8", "8", "-", "8", "8", "8", "1"]


def test_a_training_row_none_of_whose_steps_applied_is_refused() -> None:
    """A subject whose every step is skipped (its loss NaN): its row is not written."""
    subject = models._subject("tsn_resnet18", mode="fp32", cfg=TINY, device=torch.device("cpu"))
    subject.subject.clips.fill_(float("nan"))
    for _ in range(2):
        subject.train_step()
    samples = time_round_robin({"train:tsn_resnet18:fp32": lambda: None}, warmup=0, repeats=1)
    with pytest.raises(NothingTrained, match=r"^tsn_resnet18 fp32 \(fp32\): none of its 2 meas"):
        models._rows([subject], samples, {"float32": 1.0}, cfg=TINY)
