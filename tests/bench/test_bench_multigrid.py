"""`vidscale bench multigrid`: the plans it times are the trainer's, every step and micro-batch is
counted once, each shape is timed as the trainer's step through the one benchmark subject, and a
plan's compute time is the sum of its steps' measured times."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from vidscale.bench import multigrid
from vidscale.bench.multigrid import (
    MultigridBenchConfig,
    MultigridConfig,
    micro_batch_counts,
    plan_variants,
    step_key,
)
from vidscale.config import apply_overrides
from vidscale.errors import InputError
from vidscale.fastpath.settings import Candidate
from vidscale.recipes import get_recipe
from vidscale.run.timeline import Shape, make_timeline, run_sizes

K400 = "slowfast_r50_k400_8x8_multigrid_b64_e239"


def test_every_step_of_every_phase_is_counted_once() -> None:
    cfg = get_recipe(K400)
    plans = plan_variants(cfg, MultigridBenchConfig())
    assert list(plans) == ["baseline", "long", "short", "both"]
    for timeline, counts in plans.values():
        accumulate = timeline.phases[0].accumulate
        assert sum(counts.values()) == timeline.total_steps
        assert {k for _, k in counts} == {accumulate}
        assert sum(micro_batch_counts(timeline).values()) == timeline.total_steps * accumulate
    # The baseline is the recipe without multigrid: one shape, 8 clips per device, 239 epochs,
    # 8 micro-batches a step on one process (a global batch of 64).
    baseline, base_counts = plans["baseline"]
    assert [step_key(s, k) for s, k in base_counts] == ["32x224^2x8 x8"]
    assert baseline.total_steps == 239 * (240_000 // 64)
    # Both cycles: the trainer's own plan of the recipe, and PySlowFast's 3.42x fewer iterations.
    both, counts = plans["both"]
    own = make_timeline(cfg, run_sizes(cfg, world_size=1, train_size=240_000))
    assert both.phases == own.phases
    assert both.multigrid is not None
    assert both.multigrid.iteration_saving() == pytest.approx(3.42, abs=0.005)
    assert {s.frames * s.crop**2 * s.micro_batch for s, _ in counts} <= {
        32 * 224**2 * 8,
        8 * 158**2 * 64,
        16 * 158**2 * 32,
        32 * 158**2 * 16,
    }


def test_counts_equal_a_step_by_step_walk_of_the_run() -> None:
    """Epochs whose steps end in the middle of a short cycle included (768 videos)."""
    cfg = get_recipe("demo_tsm_r18_8f_multigrid_b32_e10")
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=2, train_size=768))
    assert any(p.steps_per_epoch % len(p.shapes) for p in timeline.phases)
    walked: Counter[Shape] = Counter()
    for epoch in range(timeline.epochs):
        phase = timeline.phase_at(epoch)
        for step in range(phase.steps_per_epoch):
            walked[phase.shape_at(step)] += phase.accumulate
    assert micro_batch_counts(timeline) == walked


def test_bench_sums_the_measured_steps(tmp_path: Path) -> None:
    """Each plan's compute is its step counts x the measured seconds of a step at their shape
    (its micro-batches and the update, the trainer's step on the one subject, every timed step
    counted as applied or not); the given setting is the one timed, and the progress goes to
    `echo`."""
    cfg = apply_overrides(
        get_recipe("demo_tsm_r18_8f_multigrid_b32_e10"),
        ["train.epochs=2", "data.batch_size=4", "optim.simulate_world_size=0"],
    )
    bench = MultigridBenchConfig(dataset_size=256, variants=("both",), warmup=0, repeats=1, steps=1)
    lines: list[str] = []
    out = tmp_path / "b.json"
    config = MultigridConfig("demo", cfg, bench, setting=Candidate(False, False))
    result = multigrid.run(config, out_json=out, progress=True, device="cpu", echo=lines.append)
    assert json.loads(out.read_text()) == result.to_dict()
    seconds = {r["shape"]: r["seconds"] for r in result.shapes}
    for v in result.variants:
        name = v["variant"]
        assert v["compute_s"] == pytest.approx(
            sum(r["steps"][name] * r["seconds"] for r in result.shapes)
        )
        assert v["steps"] == sum(r["steps"][name] for r in result.shapes)
        assert v["micro_batches"] == sum(r["micro_batches"][name] for r in result.shapes)
        assert v["micro_batches"] == sum(r["steps"][name] * r["accumulate"] for r in result.shapes)
    base, both = result.variants
    assert base["measured_speedup"] == 1.0 and base["model_mac_saving"] == 1.0
    assert both["steps"] < base["steps"] and both["model_mac_saving"] > 1.0
    assert both["measured_speedup"] == pytest.approx(base["compute_s"] / both["compute_s"])
    assert all(s > 0 for s in seconds.values())
    # One timed step per shape (no warm-up, one round of one call), each counted by the subject.
    assert result.timed_steps == len(result.shapes) and result.applied_steps == result.timed_steps
    # The setting given is the one timed; the shapes' count, then each round.
    assert result.fast_path == "fp32" and result.config == bench
    assert lines[0].startswith("demo: ") and lines[1:] == ["  round 1/1"]
    assert "model MACs x" in multigrid.format_report(result)


def test_bad_variants_are_refused() -> None:
    with pytest.raises(InputError, match="^--variants: expected one of long, short, both"):
        MultigridBenchConfig(variants=("baseline",)).validate()
    with pytest.raises(InputError, match="^--variants: none given"):
        MultigridBenchConfig(variants=()).validate()
