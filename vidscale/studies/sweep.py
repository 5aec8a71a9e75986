"""The batch-size study (TSM paper §4.2, Figs. 4 and 5) at demo scale: `vidscale sweep`.

Each (optimizer, global batch) pair trains the recipe once, for the same number of epochs, in
`OUT/<optimizer>_b<batch>/`. The global batch is reached as the paper's simulated rows (Table 3,
marked *) reach theirs: the per-process micro-batch stays the recipe's and
`optim.simulate_world_size` adds gradient accumulation, so a batch of 768 runs on one process.
Every run keeps the recipe's warmup and cosine decay; the peak rate follows the optimizer's rule
in `vidscale.schedules.batch_scaling` (SGD linear, LARS and LAMB square root; the reasons and
the runs that set the base rates are there). A run whose `summary.json` exists is skipped and
one with a checkpoint resumes (exactly, see `train.loop`), so an interrupted sweep continues
where it stopped; a run directory made with another configuration stops the sweep before
anything trains.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vidscale.config import ConfigError, RunConfig, apply_overrides, load_config, to_dict, validate
from vidscale.recipes import get_recipe
from vidscale.schedules.batch_scaling import SCALED_OPTIMIZERS, LRRule, batch_scaled_lr
from vidscale.studies.sweep_report import collect_run, finished_runs, format_table, write_report
from vidscale.train.builders import load_splits
from vidscale.train.timeline import run_sizes

# Fields the sweep sets for every run; a --set of one of them would silently change the study.
CONTROLLED_KEYS = (
    "optim.name",
    "optim.lr_per_8_clips",
    "optim.accumulate",
    "optim.simulate_world_size",
    "train.epochs",
)
RunState = Literal["done", "resume", "fresh"]


# -- planning -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepSpec:
    """What `vidscale sweep` was asked for; `overrides` are the user's --set (with data.root)."""

    recipe: str
    out: Path
    overrides: tuple[str, ...] = ()
    batches: tuple[int, ...] = (32, 128, 768)
    optimizers: tuple[str, ...] = SCALED_OPTIMIZERS
    epochs: int = 10
    nproc: int = 1


@dataclass(frozen=True)
class SweepRun:
    name: str
    run_dir: Path
    lr: LRRule
    overrides: tuple[str, ...]  # the user's, then the sweep's (which win)
    cfg: RunConfig


def run_name(optimizer: str, global_batch: int) -> str:
    return f"{optimizer}_b{global_batch}"


def plan_sweep(spec: SweepSpec) -> list[SweepRun]:
    """One run per (optimizer, batch), checked before any training starts.

    Raises ConfigError for a --set of a field the sweep controls, an unknown optimizer, or a
    batch that is not a whole number of micro-batches on `nproc` processes.
    """
    _check_spec(spec)
    base = apply_overrides(get_recipe(spec.recipe), list(spec.overrides))
    runs = []
    for optimizer in spec.optimizers:
        for batch in spec.batches:
            lr = batch_scaled_lr(optimizer, batch, recipe_lr_per_8_clips=base.optim.lr_per_8_clips)
            extra = (
                f"optim.name={optimizer}",
                f"optim.lr_per_8_clips={lr.lr_per_8_clips!r}",
                "optim.accumulate=1",
                f"optim.simulate_world_size={_simulated_world(base, batch, spec.nproc)}",
                f"train.epochs={spec.epochs}",
            )
            overrides = (*spec.overrides, *extra)
            cfg = apply_overrides(get_recipe(spec.recipe), list(overrides))
            validate(cfg)
            name = run_name(optimizer, batch)
            runs.append(SweepRun(name, spec.out / name, lr, overrides, cfg))
    return runs


def _check_spec(spec: SweepSpec) -> None:
    for item in spec.overrides:
        key = item.partition("=")[0].strip()
        if key in CONTROLLED_KEYS:
            raise ConfigError(f"--set {key}: the sweep sets this field for every run")
    unknown = [o for o in spec.optimizers if o not in SCALED_OPTIMIZERS]
    if unknown or not spec.optimizers:
        raise ConfigError(f"--optimizers: {unknown} not in {list(SCALED_OPTIMIZERS)}")
    if not spec.batches or spec.epochs < 1 or spec.nproc < 1:
        raise ConfigError("the sweep needs batches, --epochs >= 1 and --nproc >= 1")


def _simulated_world(base: RunConfig, global_batch: int, nproc: int) -> int:
    """The `simulate_world_size` that makes `global_batch` from the recipe's micro-batch."""
    micro = base.data.batch_size
    if global_batch % (micro * nproc):
        raise ConfigError(
            f"--batches: {global_batch} is not a multiple of data.batch_size={micro} x "
            f"{nproc} process(es)"
        )
    return global_batch // micro


def check_dataset_fits(runs: Sequence[SweepRun], *, nproc: int) -> dict[str, int]:
    """Steps per epoch of every run; ConfigError when a batch exceeds the training set."""
    splits = load_splits(runs[0].cfg)
    return {
        run.name: run_sizes(run.cfg, world_size=nproc, train_size=len(splits.train)).steps_per_epoch
        for run in runs
    }


# -- running ------------------------------------------------------------------------------------
def finished_runs_matching(out: Path, names: Sequence[str]) -> list[Path]:
    """The run directories `out/<name>` with a summary, in the order of `names`."""
    return [out / n for n in names if (out / n / "summary.json").is_file()]


def run_state(run_dir: Path) -> RunState:
    """done: summary.json written; resume: a checkpoint to continue from; fresh: neither."""
    if (run_dir / "summary.json").exists():
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


def check_existing(run: SweepRun) -> None:
    """A run directory left by an earlier sweep must hold the run this sweep would make."""
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


Launcher = Callable[[SweepRun, bool], None]


def train_in_process(run: SweepRun, resume: bool) -> None:
    from vidscale.train.loop import train

    train(run.cfg, run_dir=run.run_dir, resume="must" if resume else "auto")


def torchrun_launcher(recipe: str, nproc: int) -> Launcher:
    """Runs each training as `torchrun --standalone --nproc_per_node nproc -m vidscale train`."""

    def launch(run: SweepRun, resume: bool) -> None:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc_per_node", str(nproc), "-m", "vidscale", "train", "--recipe", recipe]
        cmd += ["--out", str(run.run_dir), "--resume", "must" if resume else "auto"]
        for item in run.overrides:
            cmd += ["--set", item]
        code = subprocess.run(cmd, check=False).returncode
        if code != 0:
            raise RuntimeError(f"{run.name}: torchrun exited with status {code}")

    return launch


def execute(runs: Sequence[SweepRun], launch: Launcher) -> list[str]:
    """Train every run that is not done (resuming partial ones); returns the names trained."""
    for run in runs:
        check_existing(run)  # all at once, before hours of training
    trained = []
    for i, run in enumerate(runs, 1):
        state = run_state(run.run_dir)
        head = f"sweep [{i}/{len(runs)}] {run.name}: peak lr {run.lr.peak_lr:.4g}"
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


def train_runs(runs: Sequence[SweepRun], *, out: Path, recipe: str, nproc: int) -> list[str]:
    """Train what is missing of `runs` (all under `out`) on `nproc` processes: in this process
    for one, under torchrun otherwise; returns the names trained (`execute`)."""
    out.mkdir(parents=True, exist_ok=True)
    launch = train_in_process if nproc == 1 else torchrun_launcher(recipe, nproc)
    return execute(runs, launch)


# -- the entry point ----------------------------------------------------------------------------
def sweep(spec: SweepSpec, *, plot_only: bool = False) -> list[dict[str, Any]]:
    """Train what is missing (unless `plot_only`), then write sweep.json / sweep.png and print."""
    if plot_only:
        dirs = finished_runs(spec.out)
        if not dirs:
            raise ConfigError(f"--plot-only: no finished runs under {spec.out}")
    else:
        runs = plan_sweep(spec)
        steps = check_dataset_fits(runs, nproc=spec.nproc)
        for run in runs:
            print(f"sweep: {run.name} peak lr {run.lr.peak_lr:.4g}, {steps[run.name]} steps/epoch")
        train_runs(runs, out=spec.out, recipe=spec.recipe, nproc=spec.nproc)
        dirs = [run.run_dir for run in runs]
    rows = [collect_run(d) for d in dirs]
    json_path, png_path = write_report(rows, spec.out, recipe=spec.recipe)
    print(format_table(rows))
    print(f"sweep: wrote {json_path} and {png_path}")
    return rows


def parse_list(text: str, cast: Callable[[str], Any]) -> tuple[Any, ...]:
    """'32,128,768' -> (32, 128, 768); ConfigError names the bad item."""
    try:
        return tuple(cast(x.strip()) for x in text.split(",") if x.strip())
    except ValueError as err:
        raise ConfigError(f"cannot parse {text!r}: {err}") from err
