"""The generic layout: `classes.txt`, `train.csv`, `val.csv` (`path,label`, see `annotations`)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from vidscale.data.annotations import AnnotationError, VideoRecord, parse_label, read_class_names
from vidscale.data.layouts.common import Missing
from vidscale.data.layouts.registry import Split, register_layout


def _read_generic_csv(
    path: Path, classes: Sequence[str], missing: Missing, base: Path
) -> list[VideoRecord]:
    if not path.is_file():
        raise AnnotationError(f"{path}: annotation file not found")
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows or [c.strip() for c in rows[0]] != ["path", "label"]:
        raise AnnotationError(f"{path}:1: expected the header 'path,label'")
    records: list[VideoRecord] = []
    for lineno, row in enumerate(rows[1:], start=2):
        where = f"{path}:{lineno}"
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2 or not row[0].strip():
            raise AnnotationError(f"{where}: expected 'path,label', got {','.join(row)!r}")
        label = parse_label(row[1], classes, where=where)
        video = base / row[0].strip()
        missing.keep(records, video, label, where=where, expected=video)
    return records


#: Also the layout whose file names the run config sets (`data.classes`, `data.train_list`, ...).
GENERIC = "generic"


@register_layout(GENERIC)
def read_generic(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    ann = ann or root
    classes = read_class_names(ann / "classes.txt")
    train = _read_generic_csv(ann / "train.csv", classes, missing, ann)
    val = _read_generic_csv(ann / "val.csv", classes, missing, ann)
    return classes, train, val
