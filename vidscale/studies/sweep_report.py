"""The batch-size study's report: sweep.json, sweep.png (TSM paper Figs. 4 and 5) and a table.

Everything is read back from the run directories as `train()` leaves them (`config.json`,
`summary.json`, `metrics.jsonl`), so a report can be rebuilt at any time (`--plot-only`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vidscale.config import ConfigError
from vidscale.recipes import get_recipe
from vidscale.run.metrics import read_metrics
from vidscale.run.summary import SUMMARY_FILE, RunSummary, summary_path
from vidscale.schedules.batch_scaling import BASE_BATCH, SQRT_BASE_LR, rule_text
from vidscale.schedules.lr import scaled_lr
from vidscale.studies.skeleton import write_report_json


def collect_run(run_dir: Path) -> dict[str, Any]:
    """One row of sweep.json from a finished run directory."""
    summary = RunSummary.read(summary_path(run_dir))
    cfg = json.loads((run_dir / "config.json").read_text())
    epochs: dict[int, dict[str, Any]] = {}
    for record in read_metrics(run_dir / "metrics.jsonl"):
        if record["kind"] == "epoch":
            epochs[int(record["epoch"])] = record  # an epoch logged twice: the last one counts
    ordered = [epochs[e] for e in sorted(epochs)]
    batch = summary.global_batch
    lr_per_8 = float(cfg["optim"]["lr_per_8_clips"])
    return {
        "run": run_dir.name,
        "optimizer": cfg["optim"]["name"],
        "global_batch": batch,
        "lr": scaled_lr(lr_per_8, batch),  # the peak, after warmup
        "lr_per_8_clips": lr_per_8,
        "lr_rule": _rule(cfg),
        "warmup_epochs": cfg["lr"]["warmup_epochs"],
        "schedule": cfg["lr"]["schedule"],
        "epochs": summary.epochs,
        "train_steps": summary.train_steps,
        "world_size": summary.world_size,
        "final_val_top1": summary.val_top1,
        "best_val_top1": summary.best_val_top1,
        "chance_top1": summary.chance_top1,
        "epoch": [int(r["epoch"]) for r in ordered],
        "train_loss": [r["train_loss"] for r in ordered],
        "val_top1": [r.get("val_top1") for r in ordered],
        "wall_seconds": summary.wall_seconds,
    }


def _rule(cfg: dict[str, Any]) -> str | None:
    try:
        base = get_recipe(cfg["recipe"]).optim.lr_per_8_clips
        return rule_text(cfg["optim"]["name"], recipe_lr_per_8_clips=base)
    except (ConfigError, ValueError):
        return None  # a run of another recipe or optimizer found in the sweep directory


def finished_runs(out: Path) -> list[Path]:
    """Run directories `<optimizer>_b<batch>` under `out` with a summary, by optimizer then batch."""
    dirs = [p.parent for p in out.glob(f"*_b*/{SUMMARY_FILE}")]
    return sorted(dirs, key=lambda d: (d.name.rpartition("_b")[0], _batch_of(d.name)))


def _batch_of(name: str) -> int:
    tail = name.rpartition("_b")[2]
    return int(tail) if tail.isdigit() else 0


def write_report(rows: list[dict[str, Any]], out: Path, *, recipe: str) -> tuple[Path, Path]:
    """Write `out/sweep.json` and `out/sweep.png`; return their paths."""
    doc = {
        "recipe": recipe,
        "lr_rules": {r["optimizer"]: r["lr_rule"] for r in rows if r["lr_rule"]},
        "base_batch": BASE_BATCH,
        "sqrt_base_lr": SQRT_BASE_LR,  # LARS and LAMB peak rates at base_batch
        "runs": rows,
    }
    json_path, png_path = out / "sweep.json", out / "sweep.png"
    write_report_json(json_path, doc)
    plot_sweep(rows, png_path)
    return json_path, png_path


def plot_sweep(rows: list[dict[str, Any]], path: Path) -> None:
    """Left: final val top-1 vs global batch (Fig. 4). Right: val top-1 vs epoch (Fig. 5)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    colors = {name: f"C{i}" for i, name in enumerate(sorted({r["optimizer"] for r in rows}))}
    _plot_accuracy_vs_batch(left, rows, colors)
    _plot_learning_curves(right, rows, colors)
    for ax in (left, right):
        if rows:
            ax.axhline(rows[0]["chance_top1"], color="grey", lw=0.8, ls=":", label="chance")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_accuracy_vs_batch(ax: Any, rows: list[dict[str, Any]], colors: dict[str, str]) -> None:
    for optimizer, color in colors.items():
        pts = sorted(
            (r["global_batch"], r["final_val_top1"])
            for r in rows
            if r["optimizer"] == optimizer and r["final_val_top1"] is not None
        )
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=optimizer)
    batches = sorted({r["global_batch"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set(xlabel="global batch (clips)", ylabel="final val top-1 (%)")
    ax.set_title("accuracy vs batch size (TSM paper Fig. 4)")


def _plot_learning_curves(ax: Any, rows: list[dict[str, Any]], colors: dict[str, str]) -> None:
    batches = sorted({r["global_batch"] for r in rows})
    # Colour names the optimizer, line style the batch: one glance finds a run.
    styles = {b: ("-", "--", ":", "-.")[i % 4] for i, b in enumerate(batches)}
    for r in sorted(rows, key=lambda r: (r["optimizer"], r["global_batch"])):
        pairs = zip(r["epoch"], r["val_top1"], strict=True)
        curve = [(e, v) for e, v in pairs if v is not None]
        if curve:
            label = f"{r['optimizer']} b{r['global_batch']}"
            style = styles[r["global_batch"]]
            ax.plot(*zip(*curve, strict=True), style, color=colors[r["optimizer"]], label=label)
    ax.set(xlabel="epoch", ylabel="val top-1 (%)")
    ax.set_title("learning curves (TSM paper Fig. 5)")


def format_table(rows: list[dict[str, Any]]) -> str:
    """One line per run: batch, peak LR, optimizer steps, final and best val top-1, wall time."""
    head = f"{'run':14s} {'batch':>6s} {'peak lr':>8s} {'steps':>6s} {'final':>7s} {'best':>7s} "
    lines = [head + f"{'wall':>8s}"]
    for r in rows:
        final, best = _pct(r["final_val_top1"]), _pct(r["best_val_top1"])
        lines.append(
            f"{r['run']:14s} {r['global_batch']:6d} {r['lr']:8.4g} {r['train_steps']:6d} "
            f"{final:>7s} {best:>7s} {r['wall_seconds'] / 60:7.1f}m"
        )
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
