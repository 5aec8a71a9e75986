"""A multigrid schedule's per-epoch rows (`MultigridSchedule.rows`) as the reference fixture
writes them: CSV with its header and cell formats, or an aligned text table."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

# The fixture's columns, in its order (`rows`, `write_csv`, `format_table`).
COLUMNS: tuple[str, ...] = (
    "epoch",
    "T_fast",
    "S",
    "B_global",
    "B_per_gpu",
    "lr",
    "bn_norm_type",
    "bn_num_splits",
    "max_sampling_rate",
    "short_cycle_crops",
    "short_cycle_per_gpu_bs",
    "ckpt_eval_preciseBN",
    "rebuild_model_before_epoch",
)


def _cell(column: str, value: object) -> str:
    # The fixture writes the LR with 10 significant digits; everything else as str().
    if column == "lr" and isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def write_csv(rows: Sequence[dict[str, object]], path: str | Path) -> None:
    """Write `rows` (from `MultigridSchedule.rows`) as CSV with the fixture's header and cell
    formats (no comment lines)."""
    with Path(path).open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([_cell(c, row[c]) for c in COLUMNS])


def format_table(rows: Sequence[dict[str, object]]) -> str:
    """`rows` as an aligned text table (the fixture's columns), for a CLI to print."""
    cells = [list(COLUMNS)] + [[_cell(c, row[c]) for c in COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )
