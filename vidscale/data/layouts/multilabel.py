"""Multi-label annotation files: `path,labels` CSV files beside a `classes.txt`.

The generic multi-label format (what the multi-label demo writes): `classes.txt` as in
`annotations` (one class name a line, index = position); a split CSV with the header
`path,labels`, the path relative to the CSV's directory and the labels as
`;`-separated class names or integer indices, e.g. `moving_left;growing`. An empty labels field
is a video with no positive class. Every error names the file and the line.

The layout (`read_multilabel`, registered as `multilabel`, read with `read_layout`):
`classes.txt`, `train.csv` and `val.csv` at the root or in `annotations_dir`. Each record's
`label_set` holds the row's labels, untimed: every clip of a video has all of them. A missing
video goes to the layouts' one missing-file policy (`common.Missing`): an `AnnotationError`
naming file and line, or with `skip_missing` listed in `LayoutSplits.missing`.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from vidscale.data.annotations import (
    AnnotationError,
    VideoRecord,
    parse_label,
    read_class_names,
    two_column_rows,
)
from vidscale.data.label_sets import NO_SINGLE_LABEL, LabelSet
from vidscale.data.layouts.common import Missing
from vidscale.data.layouts.registry import Split, register_layout

HEADER = ("path", "labels")
SEPARATOR = ";"


def parse_labels(raw: str, classes: Mapping[str, int], *, where: str) -> frozenset[int]:
    """The label set of a `;`-separated labels field; empty means none, a repeat is an error."""
    if not raw.strip():
        return frozenset()
    labels: set[int] = set()
    for item in raw.split(SEPARATOR):
        if not item.strip():
            raise AnnotationError(f"{where}: empty label in {raw!r}")
        label = parse_label(item, classes, where=where)
        if label in labels:
            raise AnnotationError(f"{where}: label {item.strip()!r} given twice in {raw!r}")
        labels.add(label)
    return frozenset(labels)


def write_multilabel_annotations(path: Path, rows: Iterable[tuple[str, Sequence[str]]]) -> None:
    """Write a `path,labels` CSV: each row a path (as given, relative to the CSV's directory)
    and its class names, joined with `;` in the order given."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        for video, names in rows:
            if any(SEPARATOR in name for name in names):
                raise ValueError(f"class names must not contain {SEPARATOR!r}: {list(names)}")
            writer.writerow((video, SEPARATOR.join(names)))


MULTILABEL = "multilabel"


def _read_multilabel_csv(path: Path, classes: Sequence[str], missing: Missing) -> list[VideoRecord]:
    """The records of a `path,labels` CSV (`annotations.two_column_rows`: a byte-order mark,
    blank rows, errors naming file and line), a listed video that is not on disk going to the
    `missing` policy. A malformed labels field (an empty, unknown, out-of-range or repeated
    label) is an `AnnotationError` naming the file and line, `skip_missing` or not."""
    index = {name: i for i, name in enumerate(classes)}
    records: list[VideoRecord] = []
    for where, video, raw in two_column_rows(path, header=HEADER, root=None):
        labels = parse_labels(raw, index, where=where)
        if video.is_file():
            records.append(VideoRecord(video, NO_SINGLE_LABEL, LabelSet(labels)))
        else:
            missing.lost(video, where=where)
    return records


@register_layout(MULTILABEL, multi_label=True)
def read_multilabel(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    ann = ann or root
    classes = read_class_names(ann / "classes.txt")
    train = _read_multilabel_csv(ann / "train.csv", classes, missing)
    val = _read_multilabel_csv(ann / "val.csv", classes, missing)
    return classes, train, val
