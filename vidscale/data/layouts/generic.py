"""The generic layout: `classes.txt`, `train.csv`, `val.csv` (`path,label`, see `annotations`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vidscale.data.annotations import (
    HEADER,
    VideoRecord,
    parse_label,
    read_class_names,
    two_column_rows,
)
from vidscale.data.layouts.common import Missing
from vidscale.data.layouts.registry import Split, register_layout


def _read_generic_csv(
    path: Path, classes: Sequence[str], missing: Missing, base: Path
) -> list[VideoRecord]:
    """The records of a `path,label` CSV, read as `vidscale prepare` and the annotation checks
    read it (`annotations.two_column_rows`: a byte-order mark, blank rows, the same errors)."""
    records: list[VideoRecord] = []
    for where, video, label_text in two_column_rows(path, header=HEADER, root=base):
        label = parse_label(label_text, classes, where=where)
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
