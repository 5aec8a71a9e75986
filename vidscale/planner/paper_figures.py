"""Tables and plots of the scaling model against the TSM paper (`vidscale plan --paper-figures`).

Writes `scaling_paper.json` (every number of `paper_scaling.paper_report`), `scaling_table3.png`
(Table 3: paper vs model time to train, and the model's step split), `scaling_fig3c.png`
(efficiency vs nodes on the Fig. 3c cluster) and `scaling_fig6.png` (Summit speed and efficiency
of TSM and both I3Ds), and returns the text tables that `plan` prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vidscale.atomic import atomic_write_text
from vidscale.planner.durations import format_duration

LABELS = {
    "tsm_resnet50": "TSM (24.3M)",
    "i3d_resnet50_3x3x3": "I3D 3x3x3 (47.0M)",
    "i3d_resnet50_3x1x1": "I3D 3x1x1 (29.1M)",
}


def format_paper(report: dict[str, Any]) -> str:
    """Table 3 with residuals, Fig. 3c at 8 nodes with the bandwidth window, Fig. 6 ratios."""
    base = report["baseline"]["model"]
    lines = [
        "Table 3 (Summit, 8 clips per GPU, 100 epochs of 240,000 clips; baseline "
        f"{report['baseline']['paper']} = {base['step_s']:.4f} s per step at 16 clips)",
        f"{'GPUs':>5} {'batch':>7} {'paper':>9} {'model':>9} {'error':>7} {'paper step':>10} "
        f"{'model step':>10} {'comm':>7} {'eff/base paper':>14} {'model':>6} {'eff/node':>8}",
    ]
    for r in report["table3"]:
        m = r["model"]
        lines.append(
            f"{r['gpus']:5d} {m['global_batch']:7,d} {r['paper']:>9} "
            f"{format_duration(m['train_s']):>9} {100 * r['error']:+6.1f}% "
            f"{r['paper_step_s']:9.3f}s {m['step_s']:9.3f}s {1e3 * m['comm_exposed_s']:5.1f}ms "
            f"{100 * r['paper_efficiency_vs_baseline']:13.1f}% "
            f"{100 * r['model_efficiency_vs_baseline']:5.1f}% {100 * m['efficiency']:7.1f}%"
        )
    lines += ["", "Fig. 3c (4 P100 per node, 8 clips per GPU): efficiency at nodes 1..8"]
    for model, preds in report["fig3c"].items():
        effs = " ".join(f"{100 * p['efficiency']:5.1f}" for p in preds)
        lines.append(f"  {LABELS[model]:18s} {effs}")
    lines.append("  8-node efficiency vs achieved per-node bandwidth (Gb/s): TSM / I3D 3x3x3")
    lines.append(
        "  "
        + "  ".join(
            f"{w['bandwidth_gbps']:g}: {100 * w['tsm']:.1f}/{100 * w['i3d_3x3x3']:.1f}"
            for w in report["fig3c_window"]
        )
    )
    ratios, check = report["fig6_ratios_1536"], report["fig6_loading_check"]
    tsm_1536 = report["fig6"]["tsm_resnet50"][-2]
    lines += [
        "",
        f"Fig. 6 (Summit, 1,536 GPUs): TSM efficiency {100 * tsm_1536['efficiency']:.1f}% "
        "(paper: > 80%); TSM / I3D 3x3x3 speed "
        f"{ratios['tsm_over_i3d_3x3x3']:.2f}x (paper 1.6x), TSM / I3D 3x1x1 "
        f"{ratios['tsm_over_i3d_3x1x1']:.2f}x (paper 2.9x), compute and network only.",
        f"  A loading time of {1e3 * check['data_frame_s']:.1f} ms per frame makes I3D 3x1x1 "
        f"{check['tsm_over_i3d_3x1x1']:.1f}x slower; the same gives "
        f"{check['tsm_over_i3d_3x3x3']:.2f}x for I3D 3x3x3 and stays hidden for TSM "
        f"({check['tsm_data_s_per_step']:.2f} s per step).",
    ]
    return "\n".join(lines)


def _save_pair(fig: Any, axes: tuple[Any, Any], path: Path) -> None:
    """Grid and legend on both panels, then write `path` and free the figure."""
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_table3(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    rows = report["table3"]
    gpus = [r["gpus"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    left.loglog(gpus, [r["paper_s"] / 60 for r in rows], "o-", label="paper (Table 3)")
    left.loglog(gpus, [r["model"]["train_s"] / 60 for r in rows], "s--", label="model")
    for r in rows:
        left.annotate(
            f"{100 * r['error']:+.0f}%", (r["gpus"], r["model"]["train_s"] / 60), fontsize=7
        )
    left.set(xlabel="GPUs (8 clips each)", ylabel="time to train 100 epochs (min)")
    left.set_title("Table 3: time to train", fontsize=10)
    x = range(len(rows))
    compute = [1e3 * r["model"]["compute_s"] for r in rows]
    comm = [1e3 * r["model"]["comm_exposed_s"] for r in rows]
    right.bar(x, compute, label="compute (model)")
    right.bar(x, comm, bottom=compute, label="exposed all-reduce (model)")
    right.plot(x, [1e3 * r["paper_step_s"] for r in rows], "ko-", label="paper step")
    right.set_xticks(list(x), [str(g) for g in gpus])
    right.set(xlabel="GPUs", ylabel="ms per step", ylim=(300, 500))
    right.set_title("step time and its split", fontsize=10)
    _save_pair(fig, (left, right), path)


def _plot_fig3c(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for model, preds in report["fig3c"].items():
        left.plot(
            [p["nodes"] for p in preds],
            [100 * p["efficiency"] for p in preds],
            "o-",
            label=LABELS[model],
        )
    left.axhline(98, color="C0", ls=":", lw=0.8, label="paper: TSM > 98% at 8")
    left.axhline(85, color="C1", ls=":", lw=0.8, label="paper: I3D 3x3x3 < 85% at 8")
    left.set(xlabel="nodes (4 P100 each)", ylabel="scaling efficiency (%)", ylim=(60, 102))
    left.set_title("Fig. 3c: 10 GbE at 85% (assumed)", fontsize=10)
    window = report["fig3c_window"]
    bw = [w["bandwidth_gbps"] for w in window]
    right.semilogx(bw, [100 * w["tsm"] for w in window], "o-", label=LABELS["tsm_resnet50"])
    right.semilogx(
        bw, [100 * w["i3d_3x3x3"] for w in window], "o-", label=LABELS["i3d_resnet50_3x3x3"]
    )
    right.semilogx(
        bw, [100 * w["i3d_3x1x1"] for w in window], "o-", label=LABELS["i3d_resnet50_3x1x1"]
    )
    right.axhline(98, color="C0", ls=":", lw=0.8)
    right.axhline(85, color="C1", ls=":", lw=0.8)
    right.set(xlabel="achieved per-node bandwidth (Gb/s)", ylabel="efficiency at 8 nodes (%)")
    right.set_title("which network reproduces Fig. 3c", fontsize=10)
    _save_pair(fig, (left, right), path)


def _plot_fig6(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for model, preds in report["fig6"].items():
        gpus = [p["gpus"] for p in preds]
        left.loglog(gpus, [p["clips_per_s"] for p in preds], "o-", label=LABELS[model])
        right.semilogx(gpus, [100 * p["efficiency"] for p in preds], "o-", label=LABELS[model])
    tsm = report["fig6"]["tsm_resnet50"]
    ideal = [tsm[0]["clips_per_s"] * p["nodes"] for p in tsm]
    left.loglog([p["gpus"] for p in tsm], ideal, "k:", lw=0.8, label="TSM ideal")
    left.set(xlabel="GPUs (6 per node, 8 clips each)", ylabel="clips/s")
    left.set_title("Fig. 6: training speed on Summit (model)", fontsize=10)
    right.axhline(80, color="grey", ls=":", lw=0.8, label="paper: TSM > 80%")
    right.set(xlabel="GPUs", ylabel="scaling efficiency (%)", ylim=(70, 101))
    _save_pair(fig, (left, right), path)


def write_paper_figures(out_dir: Path, report: dict[str, Any]) -> list[Path]:
    """`scaling_paper.json` and the three plots in `out_dir` (created if missing)."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "scaling_paper.json"
    atomic_write_text(json_path, json.dumps(report, indent=2) + "\n")
    plots = {
        "scaling_table3.png": _plot_table3,
        "scaling_fig3c.png": _plot_fig3c,
        "scaling_fig6.png": _plot_fig6,
    }
    for name, plot in plots.items():
        plot(report, out_dir / name)
    return [json_path, *(out_dir / name for name in plots)]
