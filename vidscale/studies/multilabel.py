"""TSM vs TSN on the multi-label demo, scored by mAP against chance: `vidscale study multilabel`.

Two runs on one multi-label demo directory DATA (`vidscale synth --multi-label`), in STUDY/:

- `tsm`: `demo_tsm_r18_multilabel_8f_b32_e10`, a temporal model;
- `tsn`: `demo_tsn_r18_multilabel_8f_b32_e10`, the same recipe without the temporal shift.

Each video shows three objects moving as two or three classes move, and no single frame tells
a class (`data.synthetic.multilabel`), so the temporal model can recover every label while an
order-blind average of frames ranks each class's videos about at random: its AP near the
class's positive rate. The report sets each run's final and best validation mAP against that
chance level, the mean positive rate of the classes scored, computed from the validation labels
by the evaluation itself (`summary.json`: `chance_map`). The runs follow the study skeleton
(`studies.skeleton`): a finished run is skipped and a partial one resumed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.config import ConfigError, apply_overrides, validate
from vidscale.recipes import get_recipe
from vidscale.run.data import load_data
from vidscale.run.metrics import read_metrics
from vidscale.run.summary import RunSummary, summary_path
from vidscale.run.timeline import requested_global_batch
from vidscale.schedules.batch_scaling import LRRule
from vidscale.schedules.lr import scaled_lr
from vidscale.studies import options
from vidscale.studies.runs import (
    StudyRun,
    all_runs_finished,
    check_dataset_fits,
    refuse_controlled,
)
from vidscale.studies.skeleton import Study, run_study, write_report_json

RECIPES = {
    "tsm": "demo_tsm_r18_multilabel_8f_b32_e10",
    "tsn": "demo_tsn_r18_multilabel_8f_b32_e10",
}
# Fields the study sets; a --set of one of them would silently change what is compared.
CONTROLLED_KEYS = ("data.root", "data.multi_label", "model.name")


@dataclass(frozen=True)
class MultiLabelStudySpec:
    """What `vidscale study multilabel` was asked for; `overrides` are the user's --set, applied
    to both runs after the study's own; `epochs` None keeps the recipes' epochs."""

    data: Path
    out: Path
    overrides: tuple[str, ...] = ()
    epochs: int | None = options.epochs(None)
    nproc: int = options.nproc(2)


def run_overrides(spec: MultiLabelStudySpec) -> tuple[str, ...]:
    """Both runs' --set items, in order: data.root, (train.epochs), the user's."""
    epochs = () if spec.epochs is None else (f"train.epochs={spec.epochs}",)
    return (f"data.root={spec.data}", *epochs, *spec.overrides)


def train_command(name: str, spec: MultiLabelStudySpec) -> list[str]:
    """The command that trains run `name` by hand (what `studies.runs` launches)."""
    head = ["vidscale"]
    if spec.nproc > 1:
        head = ["torchrun", "--standalone", "--nproc_per_node", str(spec.nproc), "-m", "vidscale"]
    cmd = [*head, "train", "--recipe", RECIPES[name], "--out", str(spec.out / name)]
    for item in run_overrides(spec):
        cmd += ["--set", item]
    return cmd


def design_multilabel_study(spec: MultiLabelStudySpec) -> list[StudyRun]:
    """The two runs (tsm, tsn), each config as `vidscale train` saves it for `train_command`;
    ConfigError before anything trains (a controlled field set, bad counts, DATA not a
    multi-label dataset)."""
    refuse_controlled(spec.overrides, CONTROLLED_KEYS, why="the study sets this field")
    keys = [item.partition("=")[0].strip() for item in spec.overrides]
    if spec.epochs is not None and "train.epochs" in keys:
        raise ConfigError("give --epochs or --set train.epochs, not both")
    if spec.nproc < 1 or (spec.epochs is not None and spec.epochs < 1):
        raise ConfigError("the study needs --nproc >= 1 and --epochs >= 1")
    runs = []
    for name, recipe in RECIPES.items():
        overrides = run_overrides(spec)
        cfg = apply_overrides(get_recipe(recipe), list(overrides))
        validate(cfg)
        cfg, _ = load_data(cfg)
        batch = requested_global_batch(cfg, world_size=spec.nproc)
        rule = LRRule(
            cfg.optim.name, batch, scaled_lr(cfg.optim.lr_per_8_clips, batch), "the recipe's"
        )
        runs.append(StudyRun(name, spec.out / name, rule, overrides, cfg))
    return runs


def collect_run(run_dir: Path) -> dict[str, Any]:
    """One row of study.json: the run's final and best val mAP, chance, the mAP per evaluated
    epoch (from metrics.jsonl), final hit@1 and wall time."""
    path = summary_path(run_dir)
    summary = RunSummary.read(path)
    if summary.val_map is None or summary.best_val_map is None or summary.chance_map is None:
        raise ConfigError(f"{path}: not a multi-label run (no val_map or chance_map)")
    epochs = [
        r
        for r in read_metrics(run_dir / "metrics.jsonl")
        if r["kind"] == "epoch" and "val_map" in r
    ]
    return {
        "run": run_dir.name,
        "model": summary.model,
        "recipe": summary.recipe,
        "val_map": summary.val_map,
        "best_val_map": summary.best_val_map,
        "chance_map": summary.chance_map,
        "over_chance": summary.val_map - summary.chance_map,
        "val_hit1": summary.val_top1,
        "eval_epochs": [int(r["epoch"]) for r in epochs],
        "val_map_history": [float(r["val_map"]) for r in epochs],
        "val_videos": summary.val_videos,
        "world_size": summary.world_size,
        "wall_seconds": summary.wall_seconds,
    }


def format_multilabel_table(rows: list[dict[str, Any]]) -> str:
    """One line per run: final and best mAP, chance, the margin over it, hit@1, minutes."""
    lines = [
        f"{'run':5s} {'model':14s} {'val mAP':>7s} {'best':>6s} {'chance':>6s} "
        f"{'over':>6s} {'hit@1':>6s} {'minutes':>7s}"
    ]
    for r in rows:
        lines.append(
            f"{r['run']:5s} {r['model']:14s} {r['val_map']:7.3f} {r['best_val_map']:6.3f} "
            f"{r['chance_map']:6.3f} {r['over_chance']:+6.3f} {r['val_hit1']:6.1f} "
            f"{r['wall_seconds'] / 60:7.1f}"
        )
    return "\n".join(lines)


def plot_multilabel_study(rows: list[dict[str, Any]], path: Path) -> None:
    """Val mAP vs epoch of both runs, chance dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2), dpi=110)
    for i, r in enumerate(rows):
        ax.plot(r["eval_epochs"], r["val_map_history"], "o-", ms=3, color=f"C{i}", label=r["run"])
    if rows:
        ax.axhline(rows[0]["chance_map"], color="grey", lw=0.8, ls=":", label="chance")
    ax.set(xlabel="epoch", ylabel="val mAP", ylim=(0, 1), title="multi-label demo: mAP vs epoch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


class MultiLabelStudy(Study[dict[str, Any]]):
    """The multi-label study on the study skeleton; its report is study.json and study.png."""

    label = "multilabel-study"

    def __init__(self, spec: MultiLabelStudySpec) -> None:
        self.spec, self.out, self.nproc = spec, spec.out, spec.nproc

    def design(self) -> list[StudyRun]:
        return design_multilabel_study(self.spec)

    def check_fits(self, runs: list[StudyRun]) -> None:
        steps = check_dataset_fits(runs, nproc=self.nproc)
        print(f"multilabel-study: {steps} steps/epoch", flush=True)

    def finished(self) -> list[Path]:
        return all_runs_finished(self.out, list(RECIPES))

    def report(self, run_dirs: list[Path]) -> dict[str, Any]:
        rows = [collect_run(d) for d in run_dirs]
        report = {
            "recipes": RECIPES,
            "runs": rows,
            "commands": {n: shlex.join(train_command(n, self.spec)) for n in RECIPES},
        }
        json_path, png_path = self.out / "study.json", self.out / "study.png"
        write_report_json(json_path, report)
        plot_multilabel_study(rows, png_path)
        print(format_multilabel_table(rows))
        print(f"multilabel-study: wrote {json_path} and {png_path}")
        return report


def multilabel_study(spec: MultiLabelStudySpec, *, plot_only: bool = False) -> dict[str, Any]:
    """Train what is missing (unless `plot_only`: both runs must be finished), write
    STUDY/study.json and STUDY/study.png, print the table; returns the report."""
    return run_study(MultiLabelStudy(spec), plot_only=plot_only)
