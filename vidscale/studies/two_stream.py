"""The flow stream from scratch vs from the RGB stream (Cong et al. §V, Fig. 8 and Table I) at
demo scale: `vidscale study two-stream`.

Three runs on one prepared directory PREP (`vidscale prepare ... --flow dis`), in STUDY/:

- `rgb`: `demo_tsm_r18_8f_b32_e12` reading PREP's RGB shards, tested on one clip as the flow
  stream is;
- `flow_scratch`: `demo_tsm_r18_flow_8f_b32_e10` reading PREP/flow, from random weights;
- `flow_from_rgb`: the same flow run started from the trained `rgb` run
  (`model.init_from=STUDY/rgb`: every layer copied, conv1 the mean of the RGB filters over their
  3 input channels, repeated; §V), trained after it.

The paper's measures, read back from each run's `metrics.jsonl`: the best validation top-1 and
the first epoch reaching it (with transfer the flow stream peaks at about epoch 150, without at
about 185; Fig. 8), the first epoch within `margin` points of the scratch run's best, and the
late fusion of the RGB run with each flow run (Table I: transfer leaves the flow stream's own
accuracy as it is but raises the fused two-stream accuracy). The fusion evaluates every run's
best kept epoch checkpoint (`checkpoint="best"`: the paper reports best accuracies; a checkpoint
pruned by `train.keep_checkpoints` cannot be chosen) on the validation videos both streams hold.
The runs follow the study skeleton (`studies.skeleton`): a finished run is skipped and a partial
one resumed.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.bench.options import option
from vidscale.config import ConfigError, apply_overrides, validate
from vidscale.data.prepared.prepare import FLOW_DIR
from vidscale.recipes import get_recipe
from vidscale.run.data import load_data
from vidscale.run.metrics import validation_curve
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

RGB_RECIPE = "demo_tsm_r18_8f_b32_e12"
FLOW_RECIPE = "demo_tsm_r18_flow_8f_b32_e10"
RECIPES = {"rgb": RGB_RECIPE, "flow_scratch": FLOW_RECIPE, "flow_from_rgb": FLOW_RECIPE}
FLOW_RUNS = ("flow_scratch", "flow_from_rgb")
# Fields the study sets; a --set of one of them would silently change what is compared.
CONTROLLED_KEYS = ("data.root", "data.source", "model.init_from")


@dataclass(frozen=True)
class TwoStreamStudySpec:
    """What `vidscale study two-stream` was asked for; `overrides` are the user's --set, applied
    to all three runs after the study's own; `epochs` None keeps the recipes' epochs."""

    data: Path
    out: Path
    overrides: tuple[str, ...] = ()
    epochs: int | None = options.epochs(None)
    nproc: int = options.nproc(2)
    weights: tuple[float, float] = option(
        (1.0, 1.0), help="late fusion's weights RGB,FLOW (not both 0)", low=0
    )
    margin: float = options.margin("flow_scratch's best accuracy")


# -- the runs ------------------------------------------------------------------------------------
def run_overrides(spec: TwoStreamStudySpec) -> dict[str, tuple[str, ...]]:
    """Each run's --set items, in order: data.root, (data.source, one test clip), (train.epochs),
    the user's, (model.init_from). `vidscale train --recipe RECIPES[name]` with them makes the
    same run."""
    epochs = () if spec.epochs is None else (f"train.epochs={spec.epochs}",)
    rgb_dir = (spec.out / "rgb").absolute()
    return {
        # One test clip, as the flow stream has (the demo recipe tests two): both streams'
        # accuracies and their fusion over the same view of each video, as measured.
        "rgb": (
            f"data.root={spec.data}",
            "data.source=shards",
            "data.eval_clip.num_clips=1",
            *epochs,
            *spec.overrides,
        ),
        "flow_scratch": (f"data.root={spec.data}", *epochs, *spec.overrides),
        "flow_from_rgb": (
            f"data.root={spec.data}",
            *epochs,
            *spec.overrides,
            f"model.init_from={rgb_dir}",
        ),
    }


def train_command(name: str, spec: TwoStreamStudySpec) -> list[str]:
    """The command that trains run `name` by hand (what `studies.runs` launches)."""
    head = ["vidscale"]
    if spec.nproc > 1:
        head = ["torchrun", "--standalone", "--nproc_per_node", str(spec.nproc), "-m", "vidscale"]
    cmd = [*head, "train", "--recipe", RECIPES[name], "--out", str(spec.out / name)]
    for item in run_overrides(spec)[name]:
        cmd += ["--set", item]
    return cmd


def check_spec(spec: TwoStreamStudySpec) -> None:
    """ConfigError for a --set of a controlled field, both --epochs and --set train.epochs, bad
    counts or weights, or a PREP without prepared optical flow (naming the command that makes
    it)."""
    why = "the study sets this field (--data PREP for data.root)"
    refuse_controlled(spec.overrides, CONTROLLED_KEYS, why=why)
    keys = [item.partition("=")[0].strip() for item in spec.overrides]
    if spec.epochs is not None and "train.epochs" in keys:
        raise ConfigError("give --epochs or --set train.epochs, not both")
    if spec.nproc < 1 or (spec.epochs is not None and spec.epochs < 1):
        raise ConfigError("the study needs --nproc >= 1 and --epochs >= 1")
    if len(spec.weights) != 2 or min(spec.weights) < 0 or sum(spec.weights) <= 0:
        raise ConfigError(f"--weights: two numbers >= 0, not both 0, got {spec.weights}")
    if not (spec.data / FLOW_DIR / "index_train.jsonl").is_file():
        raise ConfigError(
            f"--data {spec.data}: no prepared optical flow ({spec.data / FLOW_DIR} has no "
            f"index_train.jsonl); run `vidscale prepare --layout generic --root DEMO --out "
            f"{spec.data} --flow dis`"
        )


def design_two_stream_study(spec: TwoStreamStudySpec) -> list[StudyRun]:
    """The three runs (rgb, flow_scratch, flow_from_rgb), checked before anything trains.

    Each config is the one `vidscale train` saves for `train_command`: the recipe with
    `run_overrides`, the class count and prepared-flow settings resolved from PREP (so a run
    directory made by hand with that command is recognised as this study's run).
    """
    check_spec(spec)
    runs = []
    for name, overrides in run_overrides(spec).items():
        cfg = apply_overrides(get_recipe(RECIPES[name]), list(overrides))
        validate(cfg)
        cfg, _ = load_data(cfg)
        batch = requested_global_batch(cfg, world_size=spec.nproc)
        rule = LRRule(
            cfg.optim.name, batch, scaled_lr(cfg.optim.lr_per_8_clips, batch), "the recipe's"
        )
        runs.append(StudyRun(name, spec.out / name, rule, overrides, cfg))
    return runs


# -- the report ---------------------------------------------------------------------------------
def collect_stream_run(run_dir: Path) -> dict[str, Any]:
    """One row of study.json from a finished run: val top-1 per evaluated epoch, the best and
    the first epoch reaching it ("epochs to best", Fig. 8), final top-1 and training seconds."""
    summary = RunSummary.read(summary_path(run_dir))
    cfg = json.loads((run_dir / "config.json").read_text())
    curve = validation_curve(run_dir)
    best = max(curve.top1) if curve.top1 else None
    return {
        "run": run_dir.name,
        "recipe": summary.recipe or cfg.get("recipe", ""),
        "modality": cfg["data"]["train_clip"]["modality"],
        "init_from": cfg["model"]["init_from"],
        "epochs": summary.epochs,
        "eval_epochs": curve.epochs,
        "val_top1": curve.top1,
        "eval_seconds": curve.seconds,  # cumulative training seconds at each evaluation
        "best_val_top1": best,
        "best_epoch": curve.epochs[curve.top1.index(best)] if best is not None else None,
        "final_val_top1": summary.val_top1,
        "chance_top1": summary.chance_top1,
        "train_seconds": curve.train_seconds,
        "wall_seconds": summary.wall_seconds,
    }


def add_epochs_to_target(rows: list[dict[str, Any]], *, margin: float) -> float | None:
    """Each flow row's first epoch at >= flow_scratch's best - `margin` (None: never; the rgb
    row, another modality, gets None); returns that target (None without a scratch score)."""
    scratch = next(r for r in rows if r["run"] == "flow_scratch")
    best = scratch["best_val_top1"]
    target = None if best is None else best - margin
    for r in rows:
        pairs = zip(r["eval_epochs"], r["val_top1"], strict=True)
        hits = [e for e, a in pairs if target is not None and a >= target]
        r["epochs_to_target"] = hits[0] if r["run"] in FLOW_RUNS and hits else None
    return target


def transfer_effect(
    rows: list[dict[str, Any]], fusion: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """§V's two claims side by side: epochs to the best flow accuracy (Fig. 8: ~185 from
    scratch, ~150 with transfer), and the change of the flow stream's and of the fused best
    top-1 (Table I, AAVG3 -> AAVG4: flow +0.0, fused +1.6 points on UCF101)."""
    by_run = {r["run"]: r for r in rows}
    scratch, transfer = by_run["flow_scratch"], by_run["flow_from_rgb"]
    flow_change = None
    if scratch["best_val_top1"] is not None and transfer["best_val_top1"] is not None:
        flow_change = transfer["best_val_top1"] - scratch["best_val_top1"]
    return {
        "epochs_to_best": {n: by_run[n]["best_epoch"] for n in FLOW_RUNS},
        "epochs_to_target": {n: by_run[n]["epochs_to_target"] for n in FLOW_RUNS},
        "flow_best_top1_change": flow_change,
        "fused_top1_change": fusion["flow_from_rgb"]["top1"] - fusion["flow_scratch"]["top1"],
    }


def fuse(out: Path, *, weights: tuple[float, float]) -> dict[str, dict[str, Any]]:
    """Late fusion of `out/rgb` with each flow run, every run at its best kept checkpoint."""
    from vidscale.train.evaluation.two_stream_eval import evaluate_two_stream

    fusion = {}
    for name in FLOW_RUNS:
        result = evaluate_two_stream(out / "rgb", out / name, weights=weights, checkpoint="best")
        fusion[name] = {
            "top1": result["top1"],
            "top5": result["top5"],
            "rgb_top1": result["stream_top1"]["rgb"],
            "flow_top1": result["stream_top1"]["flow"],
            "gain_over_best_stream": result["gain_over_best_stream"],
            "videos": result["videos"],
            "checkpoints": result["checkpoints"],
        }
    return fusion


def format_two_stream_table(
    rows: list[dict[str, Any]], fusion: dict[str, dict[str, Any]], *, target: float | None
) -> str:
    def num(x: float | None, spec: str = ".2f") -> str:
        return "-" if x is None else format(x, spec)

    lines = [
        f"{'run':14s} {'init':>6s} {'epochs':>6s} {'best':>6s} {'at ep':>5s} {'to target':>9s} "
        f"{'final':>6s} {'train s':>8s}"
    ]
    for r in rows:
        init = "rgb" if r["init_from"] else "-"
        to_target = r["epochs_to_target"]
        lines.append(
            f"{r['run']:14s} {init:>6s} {r['epochs']:6d} {num(r['best_val_top1']):>6s} "
            f"{num(r['best_epoch'], 'd'):>5s} {num(to_target, 'd'):>9s} "
            f"{num(r['final_val_top1']):>6s} {r['train_seconds']:8.1f}"
        )
    lines.append(f"target: flow val top-1 >= {num(target)} (flow_scratch's best minus the margin)")
    lines.append(f"{'fusion with rgb':14s} {'rgb':>6s} {'flow':>6s} {'fused':>6s} {'gain':>6s}")
    for name, f in fusion.items():
        lines.append(
            f"{name:14s} {f['rgb_top1']:6.2f} {f['flow_top1']:6.2f} {f['top1']:6.2f} "
            f"{f['gain_over_best_stream']:+6.2f}  ({f['videos']} shared val videos)"
        )
    return "\n".join(lines)


def plot_two_stream_study(
    rows: list[dict[str, Any]], fusion: dict[str, dict[str, Any]], path: Path
) -> None:
    """Val top-1 vs epoch of the three runs, a star at each flow run's best (Fig. 8), and each
    fusion's stream and fused top-1 (Table I)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_epoch, fused) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for i, r in enumerate(rows):
        by_epoch.plot(r["eval_epochs"], r["val_top1"], "o-", ms=3, color=f"C{i}", label=r["run"])
        if r["run"] in FLOW_RUNS and r["best_epoch"] is not None:
            by_epoch.plot([r["best_epoch"]], [r["best_val_top1"]], "*", ms=14, color=f"C{i}")
    if rows:
        by_epoch.axhline(rows[0]["chance_top1"], color="grey", lw=0.8, ls=":", label="chance")
    by_epoch.set(xlabel="epoch", ylabel="val top-1 (%)", title="accuracy vs epochs (*: best)")
    by_epoch.grid(alpha=0.3)
    by_epoch.legend(fontsize=7)
    names = list(fusion)
    for j, (key, label) in enumerate(
        (("rgb_top1", "rgb"), ("flow_top1", "flow"), ("top1", "two-stream"))
    ):
        xs = [k + (j - 1) * 0.27 for k in range(len(names))]
        fused.bar(xs, [fusion[n][key] for n in names], width=0.27, color=f"C{j + 3}", label=label)
    fused.set_xticks(range(len(names)), names)
    fused.set(ylabel="top-1 on the shared val videos (%)", title="two-stream late fusion")
    fused.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- the study ---------------------------------------------------------------------------------
class TwoStreamStudy(Study[dict[str, Any]]):
    """The two-stream study on the study skeleton; its report is study.json and study.png."""

    label = "two-stream-study"

    def __init__(self, spec: TwoStreamStudySpec) -> None:
        self.spec, self.out, self.nproc = spec, spec.out, spec.nproc

    def design(self) -> list[StudyRun]:
        return design_two_stream_study(self.spec)

    def check_fits(self, runs: list[StudyRun]) -> None:
        for recipe in dict.fromkeys(RECIPES.values()):
            group = [run for run in runs if run.cfg.recipe == recipe]
            steps = check_dataset_fits(group, nproc=self.nproc)
            print(f"two-stream-study: {recipe}: {steps} steps/epoch", flush=True)

    def finished(self) -> list[Path]:
        return all_runs_finished(self.out, list(RECIPES))

    def report(self, run_dirs: list[Path]) -> dict[str, Any]:
        """The runs, the fusions of rgb with each flow run, and what transfer changed."""
        spec = self.spec
        rows = [collect_stream_run(d) for d in run_dirs]
        target = add_epochs_to_target(rows, margin=spec.margin)
        fusion = fuse(self.out, weights=spec.weights)
        report = {
            "recipes": RECIPES,
            "margin": spec.margin,
            "target_val_top1": target,
            "weights": {"rgb": spec.weights[0], "flow": spec.weights[1]},
            "runs": rows,
            "fusion": fusion,
            "transfer": transfer_effect(rows, fusion),
            "commands": {n: shlex.join(train_command(n, spec)) for n in RECIPES},
        }
        json_path, png_path = self.out / "study.json", self.out / "study.png"
        write_report_json(json_path, report)
        plot_two_stream_study(rows, fusion, png_path)
        print(format_two_stream_table(rows, fusion, target=target))
        print(f"two-stream-study: wrote {json_path} and {png_path}")
        return report


def two_stream_study(spec: TwoStreamStudySpec, *, plot_only: bool = False) -> dict[str, Any]:
    """Train what is missing (unless `plot_only`: every run must be finished), evaluate the
    fusions, write STUDY/study.json and STUDY/study.png, print the table; returns the report.

    rgb trains first: flow_from_rgb starts from its weights."""
    return run_study(TwoStreamStudy(spec), plot_only=plot_only)
