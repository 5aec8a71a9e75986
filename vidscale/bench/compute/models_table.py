"""Text tables for `vidscale bench models`: the TSM paper's Table 1 and Table 2, as measured.

Table 1 is printed in two parts: what a model costs per clip (mode-independent: MACs,
parameters, input size, Compute/IO) and what it achieved on this device in each mode
(training step time, training and inference clips/s, utilisation). The baseline comparisons
below them are "baseline / model" ratios, so with `--baseline tsm_resnet50` the TSM/TSN step
time ratio and the TSM vs I3D throughput ratios are read off directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from vidscale.bench.compute.models import STAGES, ModelsResult


def format_cost_table(rows: Sequence[dict[str, Any]]) -> str:
    """Table 1's cost columns, one line per model; (x) is the ratio to the baseline."""
    lines = [
        f"{'model':<22} {'acc.':>5} {'GMACs':>7} {'params':>13} {'input':>12} {'Compute/IO':>16}"
    ]
    seen = set()
    for r in rows:
        if r["model"] in seen:
            continue
        seen.add(r["model"])
        params = f"{r['params'] / 1e6:.1f}M ({r['params_vs_baseline']:.2f}x)"
        cio = f"{r['compute_per_io'] / 1e3:.2f}k ({r['compute_per_io_vs_baseline']:.2f}x)"
        lines.append(
            f"{r['model']:<22} {'-':>5} {r['macs'] / 1e9:>7.2f} {params:>13} {r['input']:>12} "
            f"{cio:>16}"
        )
    return "\n".join(lines)


def _rate(row: dict[str, Any], kind: str) -> str:
    if f"{kind}_clips_per_s" not in row:
        return "-"
    ratio = row.get(f"{kind}_clips_per_s_vs_baseline")
    text = f"{row[f'{kind}_clips_per_s']:.3g}"
    return text if ratio is None else f"{text} ({ratio:.2f}x)"


def _util(row: dict[str, Any], kind: str) -> str:
    key = f"{kind}_utilization"
    return f"{100 * row[key]:.1f}%" if key in row else "-"


def _step(row: dict[str, Any]) -> str:
    if "train_s" not in row:
        return "-"
    ratio = row.get("train_s_vs_baseline")
    return f"{row['train_s']:.3g}" + ("" if ratio is None else f" ({ratio:.2f}x)")


def _speedups(row: dict[str, Any]) -> str:
    keys = ("train_fast_speedup", "infer_fast_speedup")
    if not any(k in row for k in keys):
        return "-"
    return ", ".join(f"{row[k]:.2f}x" if k in row else "-" for k in keys)


def _noise(row: dict[str, Any]) -> str:
    spreads = [row[k] for k in ("train_spread", "infer_spread") if k in row]
    return f"{100 * max(spreads):.0f}%" if spreads else "-"


def _faults(row: dict[str, Any]) -> str:
    key = "train_page_faults" if "train_page_faults" in row else "infer_page_faults"
    if key not in row or math.isnan(row[key]):
        return "-"
    return f"{row[key]:.0f}"


def auto_cell(row: dict[str, Any]) -> str:
    """What "auto" chose and the probe's speedup over fp32: "bf16+cl 1.42x"; for fp32, the
    best rival it kept out: "fp32 (bf16 0.84x)", or how many its first rounds ruled out: "fp32
    (3 ruled out)"; "-" for rows without a probe (fp32 rows)."""
    if "auto_choice" not in row:
        return "-"
    chosen, probe = row["auto_choice"], row["auto_probe"]
    if chosen != "fp32":
        return f"{chosen} {row['auto_speedup']:.2f}x"
    rivals = {k: v for k, v in probe.items() if k != "fp32"}
    if not rivals:
        dropped = len(row.get("auto_dropped", {}))
        return f"fp32 ({dropped} ruled out)" if dropped else "fp32"
    best = max(rivals, key=lambda k: rivals[k]["speedup"])
    return f"fp32 ({best} {rivals[best]['speedup']:.2f}x)"


def format_speed_table(rows: Sequence[dict[str, Any]]) -> str:
    """Table 1's measured columns, one line per (model, mode); "auto (probe)" is the setting
    the "fast" row runs, as training's "auto" chose it, with the probe's ratio to fp32."""
    lines = [
        f"{'model':<22} {'mode':<4} {'compute':<8} {'train step s':>14} "
        f"{'train clips/s':>15} {'util':>6} {'infer clips/s':>15} {'util':>6} "
        f"{'noise':>5} {'faults':>6} {'fast/fp32 train, infer':>22} {'auto (probe)':>22}"
    ]
    for r in rows:
        lines.append(
            f"{r['model']:<22} {r['mode']:<4} {r['compute']:<8} {_step(r):>14} "
            f"{_rate(r, 'train'):>15} {_util(r, 'train'):>6} {_rate(r, 'infer'):>15} "
            f"{_util(r, 'infer'):>6} {_noise(r):>5} {_faults(r):>6} {_speedups(r):>22} "
            f"{auto_cell(r):>22}"
        )
    return "\n".join(lines)


def format_auto_check(rows: Sequence[dict[str, Any]]) -> str:
    """One line per model with a fast row: what "auto" chose, and its training step against
    fp32's as the median of the per-round ratios with their noise; "slower" when the ratio is
    below 1 by more than the noise (the acceptance of "auto"), and any setting the probe left
    out because it hung, crashed or raised. Empty without fp32 rows."""
    lines = []
    for r in rows:
        if "train_fast_vs_fp32" not in r or "auto_choice" not in r:
            continue
        ratio, noise = r["train_fast_vs_fp32"], r["train_fast_vs_fp32_noise"]
        verdict = "SLOWER than fp32 beyond the noise" if ratio < 1 - noise else "ok"
        left_out = "".join(
            f"; {label} left out of the probe ({what})"
            for label, what in r.get("auto_left_out", {}).items()
        )
        lines.append(
            f"  {r['model']:<22} auto={r['auto_choice']:<8} {ratio:.2f}x fp32 "
            f"(noise {noise:.0%}): {verdict}{left_out}"
        )
    return "\n".join(lines)


def format_comparisons(pairs: Sequence[dict[str, Any]]) -> str:
    """One line per (mode, model): the baseline's value over the model's."""
    lines = []
    for p in pairs:
        parts = [
            f"{label} {p[key]:.3f}"
            for key, label in (
                ("train_step_time", "training step time"),
                ("train_clips_per_s", "training clips/s"),
                ("infer_clips_per_s", "inference clips/s"),
            )
            if key in p
        ]
        lines.append(f"  {p['mode']:<4} {p['baseline']} / {p['model']}: " + ", ".join(parts))
    return "\n".join(lines)


def format_stage_table(table: Mapping[str, Sequence[int | None]]) -> str:
    """Table 2 as text, "-" where a model has no such stage."""
    width = max([len(n) for n in table] + [5])
    lines = [f"{'block':<{width}}  " + " ".join(f"{s:>11}" for s in STAGES)]
    for name, cells in table.items():
        text = " ".join(f"{'-' if c is None else c:>11}" for c in cells)
        lines.append(f"{name:<{width}}  {text}")
    return "\n".join(lines)


def _load(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def format_report(result: ModelsResult) -> str:
    """Everything `vidscale bench models` prints: Table 1 (cost, then speed), the baseline
    comparisons, Table 2, and how the numbers were measured."""
    host, s = result.hardware, result.settings
    peaks = ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in result.peak_flops_per_s.items())
    sections = [
        "Table 1 (TSM paper §3): cost per clip; (x) = ratio to the baseline "
        f"{s['baseline']}; acc. from your runs (`vidscale eval RUN`)",
        format_cost_table(result.rows),
        "",
        f"Table 1, measured on {host['device']} ({host['name']}, {host['torch_threads']} "
        f"threads), batch {s['batch']}: median of {s['repeats']} interleaved rounds "
        f"({s['warmup']} warmup; each sample {s['steps']} timed call(s) after {s['settle']} "
        f"untimed; {s['clock']} clock)",
        format_speed_table(result.rows),
        f"peak (matmul {s['peak_size']}^3): {peaks}; load average "
        f"{_load(host['load_average'])} -> {_load(host['load_average_end'])}",
        "util = achieved / peak FLOP/s of the same arithmetic (training FLOPs = 3 x forward); "
        "noise = interquartile range / median; faults = minor page faults per training step "
        "(per inference without training); auto (probe) = the setting training's "
        "train.amp/channels_last=auto chose at this shape (the fast rows run it) and the "
        "start-up probe's speedup over fp32",
    ]
    auto = format_auto_check(result.rows)
    if auto:
        title = "auto vs fp32, training step (median of the per-round fp32 / fast ratios):"
        sections += ["", title, auto]
    if result.comparisons:
        title = "Baseline / model (same mode; median of the per-round ratios):"
        sections += ["", title, format_comparisons(result.comparisons)]
    sections += ["", "Table 2: frames at each stage's output", format_stage_table(result.table2)]
    return "\n".join(sections)
