"""`vidscale multigrid-study`: four runs planned, trained once, reported side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.train.conftest import tiny_overrides
from vidscale.cli import main
from vidscale.config import ConfigError
from vidscale.train.multigrid_study import (
    VARIANTS,
    MultigridStudySpec,
    add_time_to_target,
    plan_multigrid_study,
)

RECIPE = "demo_tsm_r18_8f_b32_e20"


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
    runs = plan_multigrid_study(MultigridStudySpec(RECIPE, tmp_path, small(tmp_path)))
    assert [r.name for r in runs] == list(VARIANTS)
    cycles = [(r.cfg.multigrid.long_cycle, r.cfg.multigrid.short_cycle) for r in runs]
    assert cycles == [(False, False), (True, False), (False, True), (True, True)]
    with pytest.raises(ConfigError, match="multigrid.short_cycle"):
        plan_multigrid_study(MultigridStudySpec(RECIPE, tmp_path, ("multigrid.short_cycle=true",)))


def test_time_to_target_is_the_first_evaluation_at_the_baselines_accuracy() -> None:
    rows = [
        {"run": "baseline", "final_val_top1": 80.0, "eval_seconds": [1, 2], "val_top1": [50, 80]},
        {"run": "both", "final_val_top1": 79.5, "eval_seconds": [1, 3], "val_top1": [79.0, 79.5]},
        {"run": "long", "final_val_top1": 70.0, "eval_seconds": [1], "val_top1": [70.0]},
    ]
    assert add_time_to_target(rows, margin=1.0) == 79.0
    assert [r["seconds_to_target"] for r in rows] == [2, 1, None]


def test_the_study_trains_once_and_reports(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    args = ["multigrid-study", "--recipe", RECIPE, "--out", str(out), "--nproc", "1"]
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
