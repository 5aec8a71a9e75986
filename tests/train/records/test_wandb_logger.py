"""Weights & Biases beside metrics.jsonl: an offline run holds the same scalars at the same
steps, the config, continues the same W&B run when resumed; a missing package is one line."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tiny_run import tiny_overrides
from tests.train.records.wandb_records import WandbRun, offline_runs
from vidscale.cli import main
from vidscale.config import ConfigError, RunConfig, TrainConfig, apply_overrides, resolve
from vidscale.distributed.env import init_distributed
from vidscale.recipes import get_recipe
from vidscale.run.metrics import read_metrics
from vidscale.train import loop
from vidscale.train.records.loggers import LoggerChoice
from vidscale.train.records.run_log import RunLog
from vidscale.train.records.wandb_logger import RUN_ID_FILE, run_id

RECIPE = "demo_tsm_r18_8f_b32_e12"
WANDB = ["train.loggers=tensorboard,wandb", "train.epochs=2"]


def config(root: Path, *extra: str) -> RunConfig:
    return apply_overrides(get_recipe(RECIPE), [*tiny_overrides(root), *WANDB, *extra])


def expected_rows(run_dir: Path) -> dict[int, dict[str, Any]]:
    """metrics.jsonl as W&B rows: each record's finite numbers as `kind/field` at its step."""
    rows: dict[int, dict[str, Any]] = {}
    for record in read_metrics(run_dir / "metrics.jsonl"):
        row = rows.setdefault(record["step"], {})
        for key, value in record.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if key not in ("kind", "step", "time") and number and math.isfinite(value):
                row[f"{record['kind']}/{key}"] = value
    return rows


def merged_rows(runs: list[WandbRun]) -> dict[int, dict[str, Any]]:
    """The rows of a W&B run written in several files (a resumed run), later files last."""
    rows: dict[int, dict[str, Any]] = {}
    for run in runs:
        for step, row in run.rows.items():
            rows.setdefault(step, {}).update(row)
    return rows


@pytest.mark.slow
def test_the_offline_run_holds_the_scalars_of_metrics_jsonl_and_the_config(
    tiny_demo: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    loop.train(config(tiny_demo), run_dir=run_dir)

    (run,) = offline_runs(run_dir)
    assert run.run_id == (run_dir / RUN_ID_FILE).read_text().strip()
    records = read_metrics(run_dir / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert len(train) >= 4 and len(epochs) == 2
    for r in train:  # the loss and LR of every step, exactly
        assert (run.rows[r["step"]]["train/loss"], run.rows[r["step"]]["train/lr"]) == (
            r["loss"],
            r["lr"],
        )
    for r in epochs:
        assert run.rows[r["step"]]["epoch/val_top1"] == r["val_top1"]
        assert run.rows[r["step"]]["epoch/train_loss"] == r["train_loss"]
    assert run.rows == expected_rows(run_dir)  # and nothing else
    saved = json.loads((run_dir / "config.json").read_text())
    assert run.config == saved
    assert list((run_dir / "tensorboard").iterdir())  # TensorBoard still written beside it


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_wandb_run(
    tiny_demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(tiny_demo, "train.checkpoint_every_steps=1")
    run_dir = tmp_path / "run"
    real_step, calls = loop.train_step, {"n": 0}

    def interrupted_step(*args: Any, **kwargs: Any) -> Any:
        if calls["n"] == 3:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", interrupted_step)
    with pytest.raises(KeyboardInterrupt):
        loop.train(cfg, run_dir=run_dir)
    monkeypatch.setattr(loop, "train_step", real_step)
    loop.train(cfg, run_dir=run_dir)

    first, resumed = offline_runs(run_dir)
    stored = (run_dir / RUN_ID_FILE).read_text().strip()
    assert first.run_id == resumed.run_id == stored
    assert max(first.rows) == 3 and min(resumed.rows) == 4  # from step 3's checkpoint on
    assert merged_rows([first, resumed]) == expected_rows(run_dir)


def test_a_run_started_afresh_gets_a_new_wandb_run_and_a_resumed_one_keeps_its_own(
    tmp_path: Path,
) -> None:
    first = run_id(tmp_path, resumed=False)
    assert run_id(tmp_path, resumed=True) == first
    fresh = run_id(tmp_path, resumed=False)
    assert fresh != first
    assert (tmp_path / RUN_ID_FILE).read_text().strip() == fresh


def test_only_rank_0_opens_the_loggers(tmp_path: Path) -> None:
    env = init_distributed("cpu")
    other = dataclasses.replace(env, rank=1, world_size=2)
    choice = LoggerChoice.checked(TrainConfig(loggers=("tensorboard", "wandb")))
    log = RunLog(other, log_every=1, show_progress=False, loggers=choice)
    log.open(tmp_path, resumed_at=None, config={})
    log.write("train", step=1, loss=1.0)
    log.close(completed=True)
    assert list(tmp_path.iterdir()) == []


def test_without_the_package_asking_for_wandb_is_one_line_naming_the_extra(
    tiny_demo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails as if not installed
    with pytest.raises(ConfigError, match=r"vidscale\[tracking\]"):
        LoggerChoice.checked(TrainConfig(loggers=("wandb",)))
    LoggerChoice.checked(TrainConfig())  # TensorBoard alone needs no wandb
    argv = ["train", "--recipe", RECIPE, "--out", str(tmp_path / "run")]
    sets = [*tiny_overrides(tiny_demo), "train.loggers=wandb"]
    assert main([*argv, *(f"--set={s}" for s in sets)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vidscale: error: train.loggers: wandb is not installed")
    assert "\n" not in err and "pip install 'vidscale[tracking]'" in err
    assert not (tmp_path / "run" / "checkpoints").exists()  # stopped before training


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.loggers=tensorboard,comet", "'comet' is not one of"),
        ("train.loggers=wandb,wandb", "names a logger twice"),
        ("train.wandb_mode=cloud", "'cloud' is not one of"),
    ],
)
def test_bad_logger_settings_name_the_field(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(get_recipe(RECIPE), [override])


def test_no_loggers_leaves_metrics_jsonl_alone(tmp_path: Path) -> None:
    none = LoggerChoice(names=())
    log = RunLog(init_distributed("cpu"), log_every=1, show_progress=False, loggers=none)
    log.open(tmp_path, resumed_at=None, config={})
    log.write("train", step=1, loss=1.0)
    log.close(completed=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
