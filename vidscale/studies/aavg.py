"""The K study of the AAVG paper (Cong et al. §III-IV, Figs. 2-7) at demo scale: `vidscale study aavg`.

Every run trains the recipe with `dist.strategy=aavg` and Adam at a constant rate (the paper's
choice: Adam needs no LR schedule search, §VI) on `--nproc` learners, for the same epochs:

- `k<K>` for each K of `--aavg-k` (default 1, 2, 4, 8, -1): merged Adam/BN state (Alg. 2), constant
  batch: accuracy vs the averaging interval (Figs. 2-3);
- `k-1_plain` (AAVG1: constant batch, plain averaging), `k-1_adaptive_plain` (AAVG2: adaptive
  batch) and `k-1_adaptive` (AAVG3: adaptive batch and Alg. 2): Figs. 4-7, Table I's rows.

The runs follow the study skeleton (`studies.skeleton`): a finished run is skipped and a partial
one resumed, so an interrupted study continues where it stopped. The report (`study.json`, `study.png`, a table) reads the run
directories back: val top-1 per epoch and per second of training, bytes and seconds spent
averaging, and the batch history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.bench.options import option
from vidscale.config import ConfigError, apply_overrides, validate
from vidscale.recipes import get_recipe
from vidscale.run.metrics import read_metrics
from vidscale.run.summary import RunSummary, summary_path
from vidscale.schedules.batch_scaling import LRRule
from vidscale.studies import options
from vidscale.studies.runs import (
    StudyRun,
    check_dataset_fits,
    finished_runs_matching,
    refuse_controlled,
)
from vidscale.studies.skeleton import Study, run_study, write_report_json

# Fields the study sets for every run; a --set of one of them would silently change it.
CONTROLLED_KEYS = (
    "dist.strategy",
    "aavg.k",
    "aavg.merge_optimizer_state",
    "aavg.merge_bn",
    "aavg.adaptive_batch",
    "optim.name",
    "optim.lr_per_8_clips",
    "lr.schedule",
    "train.epochs",
)


@dataclass(frozen=True)
class StudySpec:
    """What `vidscale study aavg` was asked for; `overrides` are the user's --set. `ks` to
    `nproc` are the command's flags (`studies.options`)."""

    recipe: str
    out: Path
    overrides: tuple[str, ...] = ()
    ks: tuple[int, ...] = option(
        (1, 2, 4, 8, -1),
        help="AAVG's steps per averaging, one run each (-1: once per epoch)",
        low=-1,
        flag="aavg-k",
    )
    epochs: int = options.epochs(10)
    nproc: int = options.nproc(2)
    adam_lr: float = 1e-3  # Adam's default rate: the paper gives none
    max_batch: int = 64  # per learner: at most two doublings of the demo's 16


@dataclass(frozen=True)
class Variant:
    name: str
    k: int
    merge: bool
    adaptive: bool


def variants(ks: tuple[int, ...]) -> list[Variant]:
    """The K series (merged, constant batch), then AAVG1-3 at K = -1."""
    series = [Variant(f"k{k}", k, merge=True, adaptive=False) for k in ks]
    return [
        *series,
        Variant("k-1_plain", -1, merge=False, adaptive=False),
        Variant("k-1_adaptive_plain", -1, merge=False, adaptive=True),
        Variant("k-1_adaptive", -1, merge=True, adaptive=True),
    ]


def design_aavg_study(spec: StudySpec) -> list[StudyRun]:
    """One run per variant, checked before anything trains (ConfigError names the problem)."""
    refuse_controlled(
        spec.overrides, CONTROLLED_KEYS, why="the study sets this field for every run"
    )
    if not spec.ks or any(k != -1 and k < 1 for k in spec.ks):
        raise ConfigError(f"--aavg-k: each K must be >= 1 or -1, got {list(spec.ks)}")
    if spec.epochs < 1 or spec.nproc < 1:
        raise ConfigError("the study needs --epochs >= 1 and --nproc >= 1")
    base = apply_overrides(get_recipe(spec.recipe), list(spec.overrides))
    global_batch = base.data.batch_size * (base.optim.simulate_world_size or spec.nproc)
    lr = LRRule(
        "adamw", global_batch, spec.adam_lr, "Adam, constant, unchanged when the batch grows"
    )
    runs = []
    for v in variants(spec.ks):
        extra = (
            "dist.strategy=aavg",
            f"aavg.k={v.k}",
            f"aavg.merge_optimizer_state={str(v.merge).lower()}",
            f"aavg.merge_bn={str(v.merge).lower()}",
            f"aavg.adaptive_batch={str(v.adaptive).lower()}",
            f"aavg.max_batch={spec.max_batch}",
            "aavg.lr_rule=unchanged",
            "optim.name=adamw",
            f"optim.lr_per_8_clips={lr.lr_per_8_clips!r}",
            "lr.schedule=constant",
            "lr.warmup_epochs=0",
            f"train.epochs={spec.epochs}",
        )
        overrides = (*spec.overrides, *extra)
        cfg = apply_overrides(get_recipe(spec.recipe), list(overrides))
        validate(cfg)
        runs.append(StudyRun(v.name, spec.out / v.name, lr, overrides, cfg))
    return runs


# -- the report ---------------------------------------------------------------------------------
def collect_study_run(run_dir: Path) -> dict[str, Any]:
    """One row of study.json from a finished run directory."""
    summary = RunSummary.read(summary_path(run_dir))
    cfg = json.loads((run_dir / "config.json").read_text())
    epochs: dict[int, dict[str, Any]] = {}
    syncs = 0
    for record in read_metrics(run_dir / "metrics.jsonl"):
        if record["kind"] == "epoch":
            epochs[int(record["epoch"])] = record
        elif record["kind"] == "sync":
            syncs += 1
    ordered = [epochs[e] for e in sorted(epochs)]
    seconds, elapsed = [], 0.0
    for r in ordered:
        elapsed += float(r["epoch_seconds"])
        seconds.append(elapsed)
    a = cfg["aavg"]
    return {
        "run": run_dir.name,
        "k": a["k"],
        "merged": a["merge_optimizer_state"] and a["merge_bn"],
        "adaptive": a["adaptive_batch"],
        "world_size": summary.world_size,
        "epochs": summary.epochs,
        "train_steps": summary.train_steps,
        "final_val_top1": summary.val_top1,
        "best_val_top1": summary.best_val_top1,
        "chance_top1": summary.chance_top1,
        "comm_bytes": summary.comm_bytes,  # rank 0's, over the run
        "comm_seconds": summary.comm_seconds,
        "averagings": summary.comm_rounds,
        "sync_records": syncs,
        "batch_history": [list(h) for h in summary.batch_history or ()],
        "epoch": [int(r["epoch"]) for r in ordered],
        "val_top1": [r.get("val_top1") for r in ordered],
        "train_seconds": seconds,  # cumulative training time at each epoch end
        "wall_seconds": summary.wall_seconds,
    }


def format_study_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'run':20s} {'K':>3s} {'merge':>5s} {'adapt':>5s} {'avgs':>5s} {'MB sent':>9s} "
        f"{'comm s':>7s} {'final':>6s} {'best':>6s} {'train':>7s}"
    )
    lines = [head]
    for r in rows:
        final = "-" if r["final_val_top1"] is None else f"{r['final_val_top1']:.1f}"
        best = "-" if r["best_val_top1"] is None else f"{r['best_val_top1']:.1f}"
        lines.append(
            f"{r['run']:20s} {r['k']:3d} {'yes' if r['merged'] else 'no':>5s} "
            f"{'yes' if r['adaptive'] else 'no':>5s} {r['averagings']:5d} "
            f"{r['comm_bytes'] / 1e6:9.1f} {r['comm_seconds']:7.2f} {final:>6s} {best:>6s} "
            f"{(r['train_seconds'][-1] if r['train_seconds'] else 0.0) / 60:6.1f}m"
        )
    return "\n".join(lines)


def plot_study(rows: list[dict[str, Any]], path: Path) -> None:
    """Val top-1 vs epoch (Figs. 2-7), vs training seconds, and bytes sent per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_epoch, by_time, traffic) = plt.subplots(1, 3, figsize=(15, 4.2), dpi=110)
    for i, r in enumerate(rows):
        style = "-" if r["merged"] else "--"
        curve = [
            (e, t, v)
            for e, t, v in zip(r["epoch"], r["train_seconds"], r["val_top1"], strict=True)
            if v is not None
        ]
        if not curve:
            continue
        epochs, seconds, acc = zip(*curve, strict=True)
        by_epoch.plot(epochs, acc, style, color=f"C{i}", label=r["run"])
        by_time.plot(seconds, acc, style, color=f"C{i}", label=r["run"])
    by_epoch.set(xlabel="epoch", ylabel="val top-1 (%)", title="accuracy vs epochs")
    by_time.set(xlabel="training seconds", ylabel="val top-1 (%)", title="accuracy vs time")
    names = [r["run"] for r in rows]
    traffic.barh(names, [r["comm_bytes"] / 1e6 for r in rows], color="C0")
    if any(r["comm_bytes"] > 0 for r in rows):  # one learner sends nothing: no log scale
        traffic.set_xscale("log")
    traffic.set(xlabel="MB sent per learner", title="communication")
    for ax in (by_epoch, by_time):
        if rows:
            ax.axhline(rows[0]["chance_top1"], color="grey", lw=0.8, ls=":", label="chance")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_study_report(rows: list[dict[str, Any]], out: Path, *, recipe: str) -> tuple[Path, Path]:
    json_path, png_path = out / "study.json", out / "study.png"
    write_report_json(json_path, {"recipe": recipe, "runs": rows})
    plot_study(rows, png_path)
    return json_path, png_path


# -- the study ---------------------------------------------------------------------------------
class AavgStudy(Study[list[dict[str, Any]]]):
    """The K study on the study skeleton; its report is study.json and study.png."""

    label = "aavg-study"

    def __init__(self, spec: StudySpec) -> None:
        self.spec, self.out, self.nproc = spec, spec.out, spec.nproc

    def design(self) -> list[StudyRun]:
        return design_aavg_study(self.spec)

    def check_fits(self, runs: list[StudyRun]) -> None:
        steps = check_dataset_fits(runs, nproc=self.nproc)
        print(f"aavg-study: {len(runs)} runs, {steps[runs[0].name]} steps/epoch at the start")

    def finished(self) -> list[Path]:
        dirs = finished_runs_matching(self.out, [v.name for v in variants(self.spec.ks)])
        if not dirs:
            raise ConfigError(f"--plot-only: no finished runs under {self.out}")
        return dirs

    def report(self, run_dirs: list[Path]) -> list[dict[str, Any]]:
        rows = [collect_study_run(d) for d in run_dirs]
        json_path, png_path = write_study_report(rows, self.out, recipe=self.spec.recipe)
        print(format_study_table(rows))
        print(f"aavg-study: wrote {json_path} and {png_path}")
        return rows


def aavg_study(spec: StudySpec, *, plot_only: bool = False) -> list[dict[str, Any]]:
    """Train what is missing (unless `plot_only`), then write study.json / study.png and print;
    returns the report's rows."""
    return run_study(AavgStudy(spec), plot_only=plot_only)
