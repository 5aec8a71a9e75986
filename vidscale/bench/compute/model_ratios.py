"""`bench models`' ratios: each row against the baseline model's and each fast row against
its fp32 row (`add_ratios`), and the baseline against every other model, round by round
(`comparisons`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, Literal

from vidscale.fastpath.timing import spread

Pass = Literal["train", "infer"]
PASSES: tuple[Pass, ...] = ("train", "infer")


def add_ratios(rows: list[dict[str, Any]], *, baseline: str) -> list[dict[str, Any]]:
    """New rows with ratios to the baseline model's row of the same mode, and, for fast rows,
    the speedup over the same model's fp32 row (fp32 seconds / fast seconds); where both rows
    have per-round samples, also the median of the per-round ratios (`X_fast_vs_fp32`) and
    their noise (`X_fast_vs_fp32_noise`, IQR / median), what "auto"'s acceptance reads.

    `X_vs_baseline` is this row's X over the baseline's, as in Table 1's "(1.5x)": throughput,
    utilisation and Compute/IO (higher is better), parameters and FLOPs, and `train_s` /
    `infer_s` (step time: lower is better).
    """
    base = {r["mode"]: r for r in rows if r["model"] == baseline}
    fp32 = {r["model"]: r for r in rows if r["mode"] == "fp32"}
    out = []
    for row in rows:
        b, ref, new = base[row["mode"]], fp32.get(row["model"]), dict(row)
        for key in ("params", "flops", "compute_per_io"):
            new[f"{key}_vs_baseline"] = row[key] / b[key]
        for kind in PASSES:
            for key in (f"{kind}_s", f"{kind}_clips_per_s", f"{kind}_utilization"):
                if key in row and key in b:
                    new[f"{key}_vs_baseline"] = row[key] / b[key]
            if row["mode"] == "fast" and ref is not None and f"{kind}_s" in row:
                new[f"{kind}_fast_speedup"] = ref[f"{kind}_s"] / row[f"{kind}_s"]
                new.update(_per_round_speedup(ref, row, kind=kind))
        out.append(new)
    return out


def _per_round_speedup(
    fp32: dict[str, Any], fast: dict[str, Any], *, kind: str
) -> dict[str, float]:
    key = f"{kind}_samples_s"
    if key not in fp32 or key not in fast:
        return {}
    ratios = [a / b for a, b in zip(fp32[key], fast[key], strict=True)]
    return {
        f"{kind}_fast_vs_fp32": statistics.median(ratios),
        f"{kind}_fast_vs_fp32_noise": spread(ratios),
    }


def comparisons(rows: Sequence[dict[str, Any]], *, baseline: str) -> list[dict[str, Any]]:
    """The baseline against every other model, per mode, as "baseline / model" ratios.

    With baseline TSM, `train_step_time` is TSM's step time over the model's (TSM / TSN: the
    shift's overhead) and `train_clips_per_s` / `infer_clips_per_s` TSM's throughput over the
    model's (TSM vs I3D: Table 1's throughput column). Each is the median over rounds of the
    ratio within the round (both were timed in it, close together), so a machine that speeds up
    or slows down over the run moves both sides of every ratio alike.
    """
    base = {r["mode"]: r for r in rows if r["model"] == baseline}
    out = []
    for row in rows:
        b = base[row["mode"]]
        if row["model"] == baseline:
            continue
        pair: dict[str, Any] = {"mode": row["mode"], "baseline": baseline, "model": row["model"]}
        for kind in PASSES:
            key = f"{kind}_samples_s"
            if key not in row or key not in b:
                continue
            per_round = [x / y for x, y in zip(b[key], row[key], strict=True)]
            if kind == "train":
                pair["train_step_time"] = statistics.median(per_round)
            pair[f"{kind}_clips_per_s"] = statistics.median(1 / r for r in per_round)
        out.append(pair)
    return out
