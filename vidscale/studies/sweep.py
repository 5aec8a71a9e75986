"""The batch-size study (TSM paper §4.2, Figs. 4 and 5) at demo scale: `vidscale study batch-size`.

Each (optimizer, global batch) pair trains the recipe once, for the same number of epochs, in
`OUT/<optimizer>_b<batch>/`. The global batch is reached as the paper's simulated rows (Table 3,
marked *) reach theirs: the per-process micro-batch stays the recipe's and
`optim.simulate_world_size` adds gradient accumulation, so a batch of 768 runs on one process.
Every run keeps the recipe's warmup and cosine decay; the peak rate follows the optimizer's rule
in `vidscale.schedules.batch_scaling` (SGD linear, LARS and LAMB square root; the reasons and
the runs that set the base rates are there). The runs follow the study skeleton
(`studies.skeleton`): finished runs are skipped and partial ones resumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.bench.options import option
from vidscale.config import ConfigError, RunConfig, apply_overrides, validate
from vidscale.recipes import get_recipe
from vidscale.schedules.batch_scaling import SCALED_OPTIMIZERS, batch_scaled_lr
from vidscale.studies import options
from vidscale.studies.runs import StudyRun, check_dataset_fits, refuse_controlled
from vidscale.studies.skeleton import Study, run_study
from vidscale.studies.sweep_report import collect_run, finished_runs, format_table, write_report

# Fields the sweep sets for every run; a --set of one of them would silently change the study.
CONTROLLED_KEYS = (
    "optim.name",
    "optim.lr_per_8_clips",
    "optim.accumulate",
    "optim.simulate_world_size",
    "train.epochs",
)


@dataclass(frozen=True)
class SweepSpec:
    """What `vidscale study batch-size` was asked for; `overrides` are the user's --set (with
    data.root). The fields after them are the command's flags (`studies.options`)."""

    recipe: str
    out: Path
    overrides: tuple[str, ...] = ()
    batches: tuple[int, ...] = option(
        (32, 128, 768), help="global batches, one run each (accumulation)", low=1
    )
    optimizers: tuple[str, ...] = option(
        SCALED_OPTIMIZERS, help="one run per batch each", choices=SCALED_OPTIMIZERS
    )
    epochs: int = options.epochs(10)
    nproc: int = options.nproc(1)


def run_name(optimizer: str, global_batch: int) -> str:
    return f"{optimizer}_b{global_batch}"


def design_sweep(spec: SweepSpec) -> list[StudyRun]:
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
            runs.append(StudyRun(name, spec.out / name, lr, overrides, cfg))
    return runs


def _check_spec(spec: SweepSpec) -> None:
    refuse_controlled(
        spec.overrides, CONTROLLED_KEYS, why="the sweep sets this field for every run"
    )
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


class SweepStudy(Study[list[dict[str, Any]]]):
    """The batch-size sweep on the study skeleton; its report is sweep.json and sweep.png."""

    label = "sweep"

    def __init__(self, spec: SweepSpec) -> None:
        self.spec, self.out, self.nproc = spec, spec.out, spec.nproc

    def design(self) -> list[StudyRun]:
        return design_sweep(self.spec)

    def check_fits(self, runs: list[StudyRun]) -> None:
        steps = check_dataset_fits(runs, nproc=self.nproc)
        for run in runs:
            print(f"sweep: {run.name} peak lr {run.lr.peak_lr:.4g}, {steps[run.name]} steps/epoch")

    def finished(self) -> list[Path]:
        dirs = finished_runs(self.out)
        if not dirs:
            raise ConfigError(f"--plot-only: no finished runs under {self.out}")
        return dirs

    def report(self, run_dirs: list[Path]) -> list[dict[str, Any]]:
        rows = [collect_run(d) for d in run_dirs]
        json_path, png_path = write_report(rows, self.out, recipe=self.spec.recipe)
        print(format_table(rows))
        print(f"sweep: wrote {json_path} and {png_path}")
        return rows


def sweep(spec: SweepSpec, *, plot_only: bool = False) -> list[dict[str, Any]]:
    """Train what is missing (unless `plot_only`), then write sweep.json / sweep.png and print;
    returns the report's rows."""
    return run_study(SweepStudy(spec), plot_only=plot_only)
