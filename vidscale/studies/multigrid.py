"""The multigrid speed study at demo scale (Wu et al. §4, Table 1's question): `vidscale study
multigrid`.

The same recipe four times on `--nproc` processes: `baseline` (multigrid off), `long` (long
cycle only), `short` (short cycle only) and `both`. Each multigrid run covers the baseline's
epochs (`--epochs`, or the recipe's) x `multigrid.epoch_factor` passes over the data at its own
shapes and batches. The report reads the run directories back and puts side by side: training
seconds, optimizer steps, the FLOPs the steps actually computed (multiply-accumulates of every
clip at its shape, counted on the meta device; forward pass, x3 for forward + backward is the
same factor for every run), the final and best accuracy, and the training seconds each run
needed to reach the baseline's final accuracy minus `--margin` points (the issue's "same target
accuracy"). A finished run is skipped and a partial one resumed.

`--variants` trains a subset (the baseline is always one of them: it sets the target). With
`--seeds`, every variant is trained once per seed (`out/seed-N/<variant>`, `train.seed=N`): on a
small set one run's accuracy moves by a video or two from seed to seed, so the report adds, per
variant, the mean and spread over the seeds and how many seeds reached their own baseline's
target.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from vidscale.bench.options import option
from vidscale.config import ConfigError, RunConfig, apply_overrides, load_config, validate
from vidscale.errors import InputError
from vidscale.models.costs import model_info
from vidscale.models.registry import ModelConfig
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import LAST
from vidscale.run.data import load_splits
from vidscale.run.metrics import validation_curve
from vidscale.run.record import read_record
from vidscale.run.summary import RunSummary, summary_path
from vidscale.run.timeline import Timeline, make_timeline, requested_global_batch, run_sizes
from vidscale.schedules.batch_scaling import LRRule
from vidscale.schedules.lr import scaled_lr
from vidscale.studies import options
from vidscale.studies.runs import (
    StudyRun,
    check_dataset_fits,
    finished_runs_matching,
    refuse_controlled,
)
from vidscale.studies.skeleton import Study, run_study, write_report_json

VARIANTS: dict[str, tuple[bool, bool]] = {  # name: (long cycle, short cycle)
    "baseline": (False, False),
    "long": (True, False),
    "short": (False, True),
    "both": (True, True),
}


@dataclass(frozen=True)
class MultigridStudySpec:
    """What `vidscale study multigrid` was asked for; `overrides` are the user's --set. The
    fields after them are the command's flags (`studies.options`)."""

    recipe: str
    out: Path
    overrides: tuple[str, ...] = ()
    nproc: int = options.nproc(2)
    margin: float = options.margin("the baseline's final accuracy")
    variants: tuple[str, ...] = option(
        tuple(VARIANTS), help="which runs (the baseline is always one)", choices=tuple(VARIANTS)
    )
    seeds: tuple[int, ...] = option(  # empty: one run per variant at the recipe's seed
        (), help="e.g. 0,1,2: every variant once per seed (OUT/seed-N/...), reported as mean and sd"
    )
    # The baseline's (None: the recipe's); multigrid runs x epoch_factor.
    epochs: int | None = options.epochs(None)


def seed_dirs(spec: MultigridStudySpec) -> list[tuple[int | None, Path]]:
    """(seed, directory holding that seed's variant runs), in `--seeds` order."""
    if not spec.seeds:
        return [(None, spec.out)]
    return [(seed, spec.out / f"seed-{seed}") for seed in spec.seeds]


def _check_spec(spec: MultigridStudySpec) -> None:
    cycles = ("multigrid.long_cycle", "multigrid.short_cycle")
    refuse_controlled(spec.overrides, cycles, why="the study sets this field for every run")
    if spec.seeds:
        refuse_controlled(
            spec.overrides, ("train.seed",), why="--seeds sets this field for every run"
        )
    if spec.epochs is not None and any(
        i.partition("=")[0].strip() == "train.epochs" for i in spec.overrides
    ):
        raise ConfigError("give --epochs or --set train.epochs, not both")
    if spec.nproc < 1 or (spec.epochs is not None and spec.epochs < 1):
        raise ConfigError("the study needs --nproc >= 1 and --epochs >= 1")
    unknown = [v for v in spec.variants if v not in VARIANTS]
    if unknown:
        raise ConfigError(f"--variants: unknown {unknown[0]!r} (choose from {', '.join(VARIANTS)})")
    if "baseline" not in spec.variants:
        raise ConfigError("--variants: the baseline must be one of them (it sets the target)")
    if len(set(spec.variants)) != len(spec.variants) or len(set(spec.seeds)) != len(spec.seeds):
        raise ConfigError("--variants/--seeds: each value at most once")


def design_multigrid_study(spec: MultigridStudySpec) -> list[StudyRun]:
    """Every variant (once per seed with `--seeds`), checked before anything trains."""
    _check_spec(spec)
    runs = []
    for seed, where in seed_dirs(spec):
        seeded = () if seed is None else (f"train.seed={seed}",)
        epochs = () if spec.epochs is None else (f"train.epochs={spec.epochs}",)
        for name in (v for v in VARIANTS if v in spec.variants):
            long, short = VARIANTS[name]
            overrides = (
                *epochs,
                *spec.overrides,
                *seeded,
                f"multigrid.long_cycle={str(long).lower()}",
                f"multigrid.short_cycle={str(short).lower()}",
            )
            cfg = apply_overrides(get_recipe(spec.recipe), list(overrides))
            validate(cfg)
            batch = requested_global_batch(cfg, world_size=spec.nproc)
            peak = scaled_lr(cfg.optim.lr_per_8_clips, batch)
            rule = LRRule(
                cfg.optim.name, batch, peak, "the recipe's (x the long-cycle batch factor)"
            )
            label = name if seed is None else f"seed-{seed}/{name}"
            runs.append(StudyRun(label, where / name, rule, overrides, cfg))
    return runs


@cache
def _macs(model: str, num_classes: int, frames: int, crop: int) -> float:
    cfg = ModelConfig(name=model, num_classes=num_classes, frames=frames)
    return float(model_info(cfg, frames=frames, size=crop).macs)


def computed_macs(cfg: RunConfig, timeline: Timeline) -> float:
    """Multiply-accumulates of every training clip's forward pass, all processes, whole run."""
    total = 0.0
    world = timeline.sizes.world_size
    for phase in timeline.phases:
        for step in range(phase.steps_per_epoch):
            shape = phase.shape_at(step)
            clips = shape.micro_batch * phase.accumulate * world
            total += (
                phase.epochs
                * clips
                * _macs(cfg.model.name, cfg.model.num_classes, shape.frames, shape.crop)
            )
    return total


def collect_multigrid_run(run_dir: Path) -> dict[str, Any]:
    summary = RunSummary.read(summary_path(run_dir))
    cfg = load_config(run_dir / "config.json")
    plan = run_sizes(cfg, world_size=summary.world_size, train_size=_train_size(run_dir))
    timeline = make_timeline(cfg, plan)
    curve = validation_curve(run_dir)
    return {
        "run": run_dir.name,
        "long_cycle": cfg.multigrid.long_cycle,
        "short_cycle": cfg.multigrid.short_cycle,
        "epochs": summary.epochs,
        "train_steps": summary.train_steps,
        "train_seconds": curve.train_seconds,
        "gmacs": computed_macs(cfg, timeline) / 1e9,
        "final_val_top1": summary.val_top1,
        "best_val_top1": summary.best_val_top1,
        "eval_epochs": curve.epochs,
        "eval_seconds": curve.seconds,  # cumulative training seconds at each evaluation
        "val_top1": curve.top1,
    }


def _train_size(run_dir: Path) -> int:
    """The training videos of the run (the sizes its checkpoint's record holds); a checkpoint
    without them is an `InputError` naming it."""
    path = run_dir / "checkpoints" / LAST
    origin = read_record(path).origin  # memory-mapped: the weights are not read
    if origin is None:
        raise InputError(f"{path}: records no run sizes (written by an earlier version)")
    return origin.sizes.train_size


def add_time_to_target(rows: list[dict[str, Any]], *, margin: float) -> float:
    """Each row's training seconds until its first evaluation at >= the baseline's final
    accuracy - `margin` (None: never); returns that target."""
    baseline = next(r for r in rows if r["run"] == "baseline")
    target = float(baseline["final_val_top1"]) - margin
    for r in rows:
        hits = [s for s, a in zip(r["eval_seconds"], r["val_top1"], strict=True) if a >= target]
        r["seconds_to_target"] = hits[0] if hits else None
    return target


def format_multigrid_table(rows: list[dict[str, Any]], *, target: float) -> str:
    base = next(r for r in rows if r["run"] == "baseline")
    lines = [
        f"target: val top-1 >= {target:.2f} (the baseline's final accuracy minus the margin)",
        f"{'run':9s} {'epochs':>6s} {'steps':>6s} {'GMACs':>9s} {'x less':>6s} {'train s':>8s} "
        f"{'x faster':>8s} {'to target':>9s} {'final':>6s} {'best':>6s}",
    ]
    for r in rows:
        to_target = r["seconds_to_target"]
        lines.append(
            f"{r['run']:9s} {r['epochs']:6d} {r['train_steps']:6d} {r['gmacs']:9.1f} "
            f"{base['gmacs'] / r['gmacs']:6.2f} {r['train_seconds']:8.1f} "
            f"{base['train_seconds'] / r['train_seconds']:8.2f} "
            f"{'never' if to_target is None else f'{to_target:.1f}':>9s} "
            f"{r['final_val_top1']:6.2f} {r['best_val_top1']:6.2f}"
        )
    return "\n".join(lines)


def plot_multigrid_study(rows: list[dict[str, Any]], path: Path, *, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_epoch) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    colors = {v: f"C{i}" for i, v in enumerate(VARIANTS)}
    labelled: set[str] = set()
    for r in rows:  # one colour per variant; with seeds, one line per seed, labelled once
        label = None if r["run"] in labelled else r["run"]
        labelled.add(r["run"])
        style = {"ms": 3, "color": colors.get(r["run"], "k"), "label": label, "alpha": 0.8}
        by_time.plot(r["eval_seconds"], r["val_top1"], "o-", **style)
        by_epoch.plot(r["eval_epochs"], r["val_top1"], "o-", **style)
    by_time.set(xlabel="training seconds", ylabel="val top-1 (%)", title="accuracy vs time")
    by_epoch.set(xlabel="epoch (passes over the data)", ylabel="val top-1 (%)")
    by_epoch.set_title("accuracy vs epochs")
    for ax in (by_time, by_epoch):
        ax.axhline(target, color="grey", lw=0.8, ls=":", label="target")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def summarize_seeds(by_seed: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per variant over the seeds (rows already carry `seconds_to_target` against their own
    seed's baseline): mean and sample standard deviation of the final and best accuracy, mean
    training seconds, the speed-up of the means, and how many seeds reached the target."""
    # A variant missing from a seed (--plot-only before it finished) is averaged over the
    # seeds that have it; `seeds` says how many.
    variants = list(dict.fromkeys(r["run"] for rows in by_seed.values() for r in rows))
    runs = {v: [r for rows in by_seed.values() for r in rows if r["run"] == v] for v in variants}
    base_seconds = statistics.fmean(r["train_seconds"] for r in runs["baseline"])
    base_final = statistics.fmean(r["final_val_top1"] for r in runs["baseline"])
    summary = []
    for v, rows in runs.items():
        finals = [float(r["final_val_top1"]) for r in rows]
        seconds = statistics.fmean(r["train_seconds"] for r in rows)
        summary.append(
            {
                "run": v,
                "seeds": len(rows),
                "final_mean": statistics.fmean(finals),
                "final_sd": statistics.stdev(finals) if len(finals) > 1 else 0.0,
                "best_mean": statistics.fmean(float(r["best_val_top1"]) for r in rows),
                "final_minus_baseline": statistics.fmean(finals) - base_final,
                "train_seconds_mean": seconds,
                "x_faster": base_seconds / seconds,
                "reached_target": sum(r["seconds_to_target"] is not None for r in rows),
            }
        )
    return summary


def format_seed_summary(summary: list[dict[str, Any]], *, margin: float) -> str:
    lines = [
        f"over the seeds (target per seed: its baseline's final accuracy - {margin:g}):",
        f"{'run':9s} {'seeds':>5s} {'final':>6s} {'sd':>5s} {'vs base':>7s} {'best':>6s} "
        f"{'train s':>8s} {'x faster':>8s} {'reached':>7s}",
    ]
    for r in summary:
        lines.append(
            f"{r['run']:9s} {r['seeds']:5d} {r['final_mean']:6.2f} {r['final_sd']:5.2f} "
            f"{r['final_minus_baseline']:+7.2f} {r['best_mean']:6.2f} "
            f"{r['train_seconds_mean']:8.1f} {r['x_faster']:8.2f} "
            f"{r['reached_target']:>3d}/{r['seeds']:<3d}"
        )
    return "\n".join(lines)


class MultigridStudy(Study[list[dict[str, Any]]]):
    """The multigrid study on the study skeleton; its report is study.json and study.png."""

    label = "multigrid-study"

    def __init__(self, spec: MultigridStudySpec) -> None:
        self.spec, self.out, self.nproc = spec, spec.out, spec.nproc

    def design(self) -> list[StudyRun]:
        return design_multigrid_study(self.spec)

    def check_fits(self, runs: list[StudyRun]) -> None:
        check_dataset_fits(runs, nproc=self.nproc)
        videos = len(load_splits(runs[0].cfg).train)
        for run in runs:  # every stage's batch must fit the training set too
            make_timeline(run.cfg, run_sizes(run.cfg, world_size=self.nproc, train_size=videos))

    def finished(self) -> list[Path]:
        _check_spec(self.spec)
        found = []
        for _, where in seed_dirs(self.spec):
            dirs = finished_runs_matching(where, self.spec.variants)
            if not any(d.name == "baseline" for d in dirs):
                raise ConfigError(f"--plot-only: no finished baseline run under {where}")
            found += dirs
        return found

    def report(self, run_dirs: list[Path]) -> list[dict[str, Any]]:
        if not self.spec.seeds:
            return self._report_one_seed(run_dirs)
        return self._report_seeds(run_dirs)

    def _report_one_seed(self, run_dirs: list[Path]) -> list[dict[str, Any]]:
        rows = [collect_multigrid_run(d) for d in run_dirs]
        target = add_time_to_target(rows, margin=self.spec.margin)
        report = {"recipe": self.spec.recipe, "target_val_top1": target, "runs": rows}
        self._write(report, rows, target=target)
        print(format_multigrid_table(rows, target=target))
        self._say_written()
        return rows

    def _report_seeds(self, run_dirs: list[Path]) -> list[dict[str, Any]]:
        """Each seed's table against its own baseline, then the summary over the seeds."""
        by_seed: dict[int, list[dict[str, Any]]] = {}
        targets: dict[int, float] = {}
        where_of = dict(seed_dirs(self.spec))
        for seed in self.spec.seeds:
            where = where_of[seed]
            rows = [collect_multigrid_run(d) for d in run_dirs if d.parent == where]
            targets[seed] = add_time_to_target(rows, margin=self.spec.margin)
            by_seed[seed] = rows
            print(f"seed {seed}: " + format_multigrid_table(rows, target=targets[seed]))
        summary = summarize_seeds(by_seed)
        print(format_seed_summary(summary, margin=self.spec.margin))
        all_rows = [{**r, "seed": seed} for seed, rows in by_seed.items() for r in rows]
        report = {
            "recipe": self.spec.recipe,
            "margin": self.spec.margin,
            "seeds": list(self.spec.seeds),
            "target_val_top1": {str(seed): t for seed, t in targets.items()},
            "summary": summary,
            "runs": all_rows,
        }
        self._write(report, all_rows, target=statistics.fmean(targets.values()))
        self._say_written()
        return all_rows

    def _write(self, report: dict[str, Any], rows: list[dict[str, Any]], *, target: float) -> None:
        write_report_json(self.out / "study.json", report)
        plot_multigrid_study(rows, self.out / "study.png", target=target)

    def _say_written(self) -> None:
        print(f"multigrid-study: wrote {self.out / 'study.json'} and {self.out / 'study.png'}")


def multigrid_study(spec: MultigridStudySpec, *, plot_only: bool = False) -> list[dict[str, Any]]:
    """Train what is missing (unless `plot_only`), then write study.json / study.png and print;
    returns every run's row (with `seed` when `--seeds` was given)."""
    return run_study(MultigridStudy(spec), plot_only=plot_only)
