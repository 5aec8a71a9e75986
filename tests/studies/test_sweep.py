"""The batch-size sweep: its runs, the report, and a tiny real sweep."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.cli import main
from vidscale.config import ConfigError, save_config
from vidscale.run.metrics import MetricsLog, read_metrics
from vidscale.run.summary import summary_path
from vidscale.run.timeline import run_sizes
from vidscale.schedules.batch_scaling import SQRT_BASE_LR, batch_scaled_lr
from vidscale.studies import runs as study_runs
from vidscale.studies import sweep as sw
from vidscale.studies.runs import StudyRun
from vidscale.train.records.summary import RunCounters

RECIPE = "demo_tsm_r18_8f_b32_e12"


def spec(out: Path, **kw) -> sw.SweepSpec:
    kw.setdefault("overrides", ("data.root=/nowhere",))
    return sw.SweepSpec(recipe=RECIPE, out=out, **kw)


# -- the runs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("nproc", [1, 2])
def test_design_reaches_each_batch_by_accumulation(tmp_path: Path, nproc: int) -> None:
    runs = sw.design_sweep(spec(tmp_path, epochs=7, nproc=nproc))
    assert [r.name for r in runs] == [
        f"{o}_b{b}" for o in ("sgd", "lars", "lamb") for b in (32, 128, 768)
    ]
    for run in runs:
        plan = run_sizes(run.cfg, world_size=nproc, train_size=768)
        assert plan.global_batch == run.lr.global_batch
        assert plan.accumulate == run.lr.global_batch // (16 * nproc)  # micro-batch unchanged
        assert plan.base_lr == pytest.approx(run.lr.peak_lr)
        assert run.cfg.optim.name == run.lr.optimizer
        assert run.cfg.train.epochs == 7
        assert run.cfg.lr.warmup_epochs == 1.0 and run.cfg.lr.schedule == "cosine"
        assert run.run_dir == tmp_path / run.name


def test_design_rejects_what_would_corrupt_the_study(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="optim.name"):
        sw.design_sweep(spec(tmp_path, overrides=("optim.name=sgd",)))
    with pytest.raises(ConfigError, match="multiple"):
        sw.design_sweep(spec(tmp_path, batches=(40,)))
    with pytest.raises(ConfigError, match="multiple"):
        sw.design_sweep(spec(tmp_path, batches=(48,), nproc=2))
    with pytest.raises(ConfigError, match="optimizers"):
        sw.design_sweep(spec(tmp_path, optimizers=("adamw",)))


def test_a_batch_larger_than_the_training_set_fails_before_training(
    tiny_demo: Path, tmp_path: Path
) -> None:
    runs = sw.design_sweep(spec(tmp_path, overrides=(f"data.root={tiny_demo}",), batches=(32,)))
    with pytest.raises(ConfigError, match="cannot fill one step"):
        study_runs.check_dataset_fits(runs, nproc=1)


# -- report from run directories written the way train() writes them ----------------------------
def fake_run(run: StudyRun, *, val: list[float], losses: list[float]) -> None:
    """config.json, metrics.jsonl and summary.json through the writers the loop uses."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    cfg = run.cfg
    save_config(cfg, run.run_dir / "config.json")
    log = MetricsLog(run.run_dir, enabled=True)
    steps = 768 // run.lr.global_batch
    counters = RunCounters(steps=steps * len(val), wall_seconds=12.5 * len(val))
    for epoch, (top1, loss) in enumerate(zip(val, losses, strict=True), 1):
        log.write("train", step=epoch * steps, loss=loss, lr=0.1, epoch=epoch - 1)
        log.write(
            "epoch",
            step=epoch * steps,
            train_loss=loss,
            train_top1=50.0,
            epoch_seconds=12.5,
            data_wait_fraction=0.01,
            epoch=epoch,
            lr=0.1,
            val_top1=top1,
            val_top5=100.0,
            val_loss=loss,
            val_count=192,
        )
        counters.add_val(top1)
    log.close()
    summary = RunCounters.merge([counters.as_dict()]).summary(
        model=cfg.model.name,
        world_size=1,
        global_batch=run.lr.global_batch,
        epochs=len(val),
        num_classes=8,
        extra={"recipe": cfg.recipe, "base_lr": run.lr.peak_lr},
    )
    summary.write(summary_path(run.run_dir))


def test_report_from_finished_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = sw.design_sweep(spec(tmp_path, optimizers=("sgd", "lamb"), batches=(32, 768), epochs=3))
    for i, run in enumerate(runs):
        fake_run(run, val=[20.0 + i, 40.0 + i, 35.0 + i], losses=[2.0, 1.5, 1.2])
    # An epoch logged twice (a resumed run): the last record counts, once.
    with (runs[0].run_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"kind": "epoch", "step": 72, "epoch": 3, "train_loss": 1.1}) + "\n")

    rows = sw.sweep(spec(tmp_path), plot_only=True)

    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert doc["runs"] == rows
    assert set(doc["lr_rules"]) == {"sgd", "lamb"}
    by_name = {r["run"]: r for r in rows}
    assert list(by_name) == ["lamb_b32", "lamb_b768", "sgd_b32", "sgd_b768"]
    sgd = by_name["sgd_b768"]
    assert sgd["optimizer"] == "sgd" and sgd["global_batch"] == 768
    assert sgd["lr"] == pytest.approx(1.2)
    assert sgd["final_val_top1"] == 36.0 and sgd["best_val_top1"] == 41.0
    assert sgd["epoch"] == [1, 2, 3] and sgd["val_top1"] == [21.0, 41.0, 36.0]
    assert sgd["train_steps"] == 3 and sgd["wall_seconds"] == pytest.approx(37.5)
    assert by_name["sgd_b32"]["train_loss"] == [2.0, 1.5, 1.1]
    assert by_name["sgd_b32"]["val_top1"] == [20.0, 40.0, None]
    assert by_name["lamb_b768"]["lr"] == pytest.approx(SQRT_BASE_LR["lamb"] * math.sqrt(24))
    png = (tmp_path / "sweep.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    table = capsys.readouterr().out
    assert "lamb_b768" in table and "36.0" in table and "41.0" in table


def test_plot_only_needs_finished_runs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no finished runs"):
        sw.sweep(spec(tmp_path), plot_only=True)


def test_cli_sweep_plot_only_and_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = sw.design_sweep(spec(tmp_path, optimizers=("lars",), batches=(128,), epochs=2))[0]
    fake_run(run, val=[30.0, 55.0], losses=[2.0, 1.0])
    assert main(["study", "batch-size", "--out", str(tmp_path), "--plot-only"]) == 0
    assert json.loads((tmp_path / "sweep.json").read_text())["runs"][0]["run"] == "lars_b128"
    assert "lars_b128" in capsys.readouterr().out  # the table
    assert main(["study", "batch-size", "--out", str(tmp_path), "--plot-only", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # stdout holds the report alone
    assert doc == json.loads((tmp_path / "sweep.json").read_text())
    assert main(["study", "batch-size", "--out", str(tmp_path), "--set", "train.epochs=3"]) == 2
    assert "train.epochs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:  # the flag's type, from SweepSpec.batches
        main(["study", "batch-size", "--out", str(tmp_path), "--batches", "32,x"])
    assert bad.value.code == 2
    assert "argument --batches: expected an integer, got 'x'" in capsys.readouterr().err
    assert main(["study", "batch-size", "--out", str(tmp_path), "--batches", "32,0"]) == 2
    assert capsys.readouterr().err == "vidscale: error: --batches: must be >= 1, got 0\n"


# -- a real sweep, end to end -------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_sweep_end_to_end_then_resume_skips(
    tiny_demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 16 training videos, micro-batch 4: global batches 4 (4 steps) and 8 (2 steps), 1 epoch.
    sets = (*tiny_overrides(tiny_demo), "train.log_every=1")
    small = sw.SweepSpec(
        recipe=RECIPE,
        out=tmp_path / "sweep",
        overrides=sets,
        batches=(4, 8),
        optimizers=("sgd", "lars"),
        epochs=1,
    )
    rows = sw.sweep(small)

    assert [r["run"] for r in rows] == ["sgd_b4", "sgd_b8", "lars_b4", "lars_b8"]
    for r in rows:
        assert r["epoch"] == [1] and r["val_top1"][0] is not None
        assert r["final_val_top1"] == r["val_top1"][-1]
        assert r["train_steps"] == 16 // r["global_batch"]
        rule = batch_scaled_lr(r["optimizer"], r["global_batch"], recipe_lr_per_8_clips=0.0125)
        assert r["lr"] == pytest.approx(rule.peak_lr)
        metrics = read_metrics(tmp_path / "sweep" / r["run"] / "metrics.jsonl")
        logged = [m["lr"] for m in metrics]
        assert max(logged) <= rule.peak_lr + 1e-12
        # the epoch's loss is the mean of its steps' losses, each logged (log_every=1)
        steps = [m["loss"] for m in metrics if m["kind"] == "train"]
        assert len(steps) == r["train_steps"]
        assert r["train_loss"][0] == pytest.approx(sum(steps) / len(steps), rel=1e-9)
    assert (tmp_path / "sweep" / "sweep.png").exists()

    def must_not_train(run: StudyRun, resume: bool) -> None:
        raise AssertionError(f"{run.name} was finished and must be skipped")

    monkeypatch.setattr(study_runs, "train_in_process", must_not_train)
    assert sw.sweep(small) == rows
