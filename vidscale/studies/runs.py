"""The runs of a study: what each one is, whether it is done, and training the missing ones.

A run whose `summary.json` exists is skipped and one with a checkpoint resumes (exactly, see
`train.loop`), so an interrupted study continues where it stopped; a run directory made with
another configuration stops the study before anything trains.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vidscale.config import ConfigError, RunConfig, load_config, to_dict
from vidscale.run.data import load_splits
from vidscale.run.summary import summary_path
from vidscale.run.timeline import run_sizes
from vidscale.schedules.batch_scaling import LRRule

RunState = Literal["done", "resume", "fresh"]


@dataclass(frozen=True)
class StudyRun:
    """One training of a study: `vidscale train --recipe cfg.recipe --out run_dir` with
    `overrides` (the user's --set, then the study's, which win) makes exactly `cfg`."""

    name: str
    run_dir: Path
    lr: LRRule
    overrides: tuple[str, ...]
    cfg: RunConfig


def refuse_controlled(overrides: Iterable[str], controlled: Iterable[str], *, why: str) -> None:
    """ConfigError for a --set of a field the study sets itself (it would silently change the
    comparison); `why` ends the message."""
    keys = set(controlled)
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key in keys:
            raise ConfigError(f"--set {key}: {why}")


def check_dataset_fits(runs: Sequence[StudyRun], *, nproc: int) -> dict[str, int]:
    """Steps per epoch of every run; ConfigError when a batch exceeds the training set."""
    splits = load_splits(runs[0].cfg)
    return {
        run.name: run_sizes(run.cfg, world_size=nproc, train_size=len(splits.train)).steps_per_epoch
        for run in runs
    }


def finished_runs_matching(out: Path, names: Sequence[str]) -> list[Path]:
    """The run directories `out/<name>` with a summary, in the order of `names`."""
    return [out / n for n in names if summary_path(out / n).is_file()]


def all_runs_finished(out: Path, names: Sequence[str]) -> list[Path]:
    """`out/<name>` for every name, in order (`--plot-only`): ConfigError naming the runs
    without a summary when any is unfinished."""
    done = {d.name for d in finished_runs_matching(out, names)}
    missing = sorted(set(names) - done)
    if missing:
        raise ConfigError(f"--plot-only: unfinished runs under {out}: {missing}")
    return [out / n for n in names]


def run_state(run_dir: Path) -> RunState:
    """done: summary.json written; resume: a checkpoint to continue from; fresh: neither."""
    if summary_path(run_dir).exists():
        return "done"
    if (run_dir / "checkpoints" / "last.pt").exists():
        return "resume"
    return "fresh"


def config_differences(saved: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ; the dataset path and the resolved class count aside."""
    ignored = {"data.root", "model.num_classes"}
    flat_saved, flat_planned = _flatten(saved), _flatten(planned)
    keys = sorted(set(flat_saved) | set(flat_planned))
    return [k for k in keys if k not in ignored and flat_saved.get(k) != flat_planned.get(k)]


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def check_existing(run: StudyRun) -> None:
    """A run directory left by an earlier study must hold the run this study would make."""
    saved_path = run.run_dir / "config.json"
    if not saved_path.exists():
        return
    planned = json.loads(json.dumps(to_dict(run.cfg)))  # tuples -> lists, as saved
    # Read as a config (fields added since take their defaults), then compared as saved.
    saved = json.loads(json.dumps(to_dict(load_config(saved_path))))
    diffs = config_differences(saved, planned)
    if diffs:
        raise ConfigError(
            f"{run.run_dir} was trained with a different configuration ({', '.join(diffs[:6])}); "
            "use another --out or remove that run"
        )


Launcher = Callable[[StudyRun, bool], None]


def train_in_process(run: StudyRun, resume: bool) -> None:
    from vidscale.train.loop import train

    train(run.cfg, run_dir=run.run_dir, resume="must" if resume else "auto")


def torchrun_launcher(nproc: int) -> Launcher:
    """Runs each training as `torchrun --standalone --nproc_per_node nproc -m vidscale train`
    with the run's recipe and overrides."""

    def launch(run: StudyRun, resume: bool) -> None:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc_per_node", str(nproc), "-m", "vidscale", "train"]
        cmd += ["--recipe", run.cfg.recipe, "--out", str(run.run_dir)]
        cmd += ["--resume", "must" if resume else "auto"]
        for item in run.overrides:
            cmd += ["--set", item]
        code = subprocess.run(cmd, check=False).returncode
        if code != 0:
            raise RuntimeError(f"{run.name}: torchrun exited with status {code}")

    return launch


def execute(runs: Sequence[StudyRun], launch: Launcher, *, label: str = "study") -> list[str]:
    """Train every run that is not done (resuming partial ones); returns the names trained."""
    for run in runs:
        check_existing(run)  # all at once, before hours of training
    trained = []
    for i, run in enumerate(runs, 1):
        state = run_state(run.run_dir)
        head = f"{label} [{i}/{len(runs)}] {run.name}: peak lr {run.lr.peak_lr:.4g}"
        if state == "done":
            print(f"{head}: done, skipped", flush=True)
            continue
        if state == "fresh":
            # A run killed before its first checkpoint leaves log lines behind: start clean.
            (run.run_dir / "metrics.jsonl").unlink(missing_ok=True)
            shutil.rmtree(run.run_dir / "tensorboard", ignore_errors=True)
        print(f"{head}: {'resuming' if state == 'resume' else 'training'}", flush=True)
        launch(run, state == "resume")
        trained.append(run.name)
    return trained


def train_runs(
    runs: Sequence[StudyRun], *, out: Path, nproc: int, label: str = "study"
) -> list[str]:
    """Train what is missing of `runs` (all under `out`) on `nproc` processes: in this process
    for one, under torchrun otherwise; returns the names trained (`execute`)."""
    out.mkdir(parents=True, exist_ok=True)
    launch = train_in_process if nproc == 1 else torchrun_launcher(nproc)
    return execute(runs, launch, label=label)
