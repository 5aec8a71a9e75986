"""`vidscale multigrid-study`: four runs planned, trained once, reported side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.cli import main
from vidscale.config import ConfigError
from vidscale.studies.multigrid import (
    VARIANTS,
    MultigridStudySpec,
    add_time_to_target,
    design_multigrid_study,
    summarize_seeds,
)

RECIPE = "demo_tsm_r18_8f_b32_e12"


def small(root: Path) -> tuple[str, ...]:
    """One process, 1 clip per step at the base shape, two long-cycle stages, 2 -> 3 epochs."""
    return (
        *tiny_overrides(root),
        "data.batch_size=1",
        "optim.simulate_world_size=0",
        "train.epochs=2",
        "multigrid.long_cycle_factors=[[0.5, 0.7071067811865476], [1.0, 1.0]]",
        "multigrid.bn_base_size=1",
    )


def test_the_study_plans_four_runs_and_refuses_the_fields_it_sets(tmp_path: Path) -> None:
    runs = design_multigrid_study(MultigridStudySpec(RECIPE, tmp_path, small(tmp_path)))
    assert [r.name for r in runs] == list(VARIANTS)
    cycles = [(r.cfg.multigrid.long_cycle, r.cfg.multigrid.short_cycle) for r in runs]
    assert cycles == [(False, False), (True, False), (False, True), (True, True)]
    with pytest.raises(ConfigError, match="multigrid.short_cycle"):
        design_multigrid_study(
            MultigridStudySpec(RECIPE, tmp_path, ("multigrid.short_cycle=true",))
        )


def test_seeds_and_variants_plan_one_run_per_seed_and_variant(tmp_path: Path) -> None:
    spec = MultigridStudySpec(
        RECIPE, tmp_path, small(tmp_path), variants=("long", "baseline"), seeds=(3, 7)
    )
    runs = design_multigrid_study(spec)
    # Study order within a seed, whatever order --variants named them in.
    assert [r.name for r in runs] == [
        "seed-3/baseline",
        "seed-3/long",
        "seed-7/baseline",
        "seed-7/long",
    ]
    assert [r.run_dir.relative_to(tmp_path).as_posix() for r in runs] == [
        "seed-3/baseline",
        "seed-3/long",
        "seed-7/baseline",
        "seed-7/long",
    ]
    assert [r.cfg.train.seed for r in runs] == [3, 3, 7, 7]
    assert [r.cfg.multigrid.long_cycle for r in runs] == [False, True, False, True]


@pytest.mark.parametrize(
    ("variants", "seeds", "overrides", "message"),
    [
        (("baseline", "fast"), (), (), "unknown 'fast'"),
        (("long",), (), (), "the baseline must be one of them"),
        (("baseline", "baseline"), (), (), "at most once"),
        (("baseline",), (1, 1), (), "at most once"),
        (("baseline",), (1,), ("train.seed=4",), "--set train.seed"),
    ],
)
def test_bad_variants_or_seeds_are_refused(
    tmp_path: Path,
    variants: tuple[str, ...],
    seeds: tuple[int, ...],
    overrides: tuple[str, ...],
    message: str,
) -> None:
    spec = MultigridStudySpec(RECIPE, tmp_path, overrides, variants=variants, seeds=seeds)
    with pytest.raises(ConfigError, match=message):
        design_multigrid_study(spec)


def test_epochs_set_every_run_and_clash_with_a_set_of_train_epochs(tmp_path: Path) -> None:
    spec = MultigridStudySpec(RECIPE, tmp_path, ("data.root=/x",), epochs=3)
    assert {r.cfg.train.epochs for r in design_multigrid_study(spec)} == {3}
    clash = MultigridStudySpec(RECIPE, tmp_path, ("train.epochs=4",), epochs=3)
    with pytest.raises(ConfigError, match="--epochs or --set train.epochs"):
        design_multigrid_study(clash)


def test_the_seed_summary_averages_each_variant_against_the_mean_baseline() -> None:
    def row(run: str, final: float, seconds: float, reached: float | None) -> dict[str, object]:
        best = final + 1
        return {
            "run": run,
            "final_val_top1": final,
            "best_val_top1": best,
            "train_seconds": seconds,
            "seconds_to_target": reached,
        }

    by_seed = {
        0: [row("baseline", 90.0, 100.0, 90.0), row("long", 89.0, 80.0, 70.0)],
        1: [row("baseline", 92.0, 110.0, 95.0), row("long", 88.0, 90.0, None)],
    }
    base, long = summarize_seeds(by_seed)
    assert (base["run"], base["final_mean"], base["x_faster"]) == ("baseline", 91.0, 1.0)
    assert base["final_sd"] == pytest.approx(2**0.5)
    assert (long["final_mean"], long["best_mean"]) == (88.5, 89.5)
    assert long["final_minus_baseline"] == pytest.approx(-2.5)
    assert long["x_faster"] == pytest.approx(105.0 / 85.0)
    assert (long["reached_target"], long["seeds"]) == (1, 2)
    # A variant not (yet) finished in one seed is averaged over the seeds that have it.
    by_seed[2] = [row("baseline", 91.0, 105.0, 80.0)]
    assert [s["seeds"] for s in summarize_seeds(by_seed)] == [3, 2]


def test_time_to_target_is_the_first_evaluation_at_the_baselines_accuracy() -> None:
    rows = [
        {"run": "baseline", "final_val_top1": 80.0, "eval_seconds": [1, 2], "val_top1": [50, 80]},
        {"run": "both", "final_val_top1": 79.5, "eval_seconds": [1, 3], "val_top1": [79.0, 79.5]},
        {"run": "long", "final_val_top1": 70.0, "eval_seconds": [1], "val_top1": [70.0]},
    ]
    assert add_time_to_target(rows, margin=1.0) == 79.0
    assert [r["seconds_to_target"] for r in rows] == [2, 1, None]


@pytest.mark.slow
def test_the_study_trains_once_and_reports(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    args = ["study", "multigrid", "--recipe", RECIPE, "--out", str(out), "--nproc", "1"]
    for item in small(tiny_demo):
        args += ["--set", item]
    assert main(args) == 0
    report = json.loads((out / "study.json").read_text())
    rows = {r["run"]: r for r in report["runs"]}
    assert set(rows) == set(VARIANTS)
    base, both = rows["baseline"], rows["both"]
    assert (base["epochs"], both["epochs"]) == (2, 3)
    # Fewer steps and fewer multiply-accumulates for the same data seen 1.5 times.
    assert both["train_steps"] < base["train_steps"]
    assert both["gmacs"] < base["gmacs"] and rows["short"]["gmacs"] < base["gmacs"]
    assert (out / "study.png").stat().st_size > 0
    text = capsys.readouterr().out
    assert "target: val top-1 >=" in text
    # Again: every run is done and skipped; --plot-only rebuilds from the directories.
    assert main(args) == 0
    assert text.count("training") == 4 and "done, skipped" in capsys.readouterr().out
    assert main([*args, "--plot-only"]) == 0


@pytest.mark.slow
def test_the_study_over_seeds_trains_each_seed_and_summarizes(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    args = ["study", "multigrid", "--recipe", RECIPE, "--out", str(out), "--nproc", "1"]
    args += ["--variants", "baseline,long", "--seeds", "0,1"]
    for item in small(tiny_demo):
        args += ["--set", item]
    assert main(args) == 0
    report = json.loads((out / "study.json").read_text())
    assert report["seeds"] == [0, 1] and set(report["target_val_top1"]) == {"0", "1"}
    assert [(r["seed"], r["run"]) for r in report["runs"]] == [
        (0, "baseline"),
        (0, "long"),
        (1, "baseline"),
        (1, "long"),
    ]
    assert [s["run"] for s in report["summary"]] == ["baseline", "long"]
    for seed in (0, 1):
        saved = json.loads((out / f"seed-{seed}" / "long" / "config.json").read_text())
        assert saved["train"]["seed"] == seed

    # Different seeds, different initial weights: the baselines' epoch losses differ.
    def epoch_losses(seed: int) -> list[float]:
        lines = (out / f"seed-{seed}" / "baseline" / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        return [r["train_loss"] for r in records if r["kind"] == "epoch"]

    assert len(epoch_losses(0)) == 2 and epoch_losses(0) != epoch_losses(1)
    text = capsys.readouterr().out
    assert "over the seeds" in text and "seed 1: target" in text
    assert main([*args, "--plot-only"]) == 0
    assert "over the seeds" in capsys.readouterr().out
