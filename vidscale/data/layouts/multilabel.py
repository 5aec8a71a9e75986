"""Multi-label annotation files: `path,labels` CSV files beside a `classes.txt`.

The generic multi-label format (what the multi-label demo writes): `classes.txt` as in
`annotations` (one class name a line, index = position); a split CSV with the header
`path,labels`, the path relative to the CSV's directory (or to `root`) and the labels as
`;`-separated class names or integer indices, e.g. `moving_left;growing`. An empty labels field
is a video with no positive class. Every error names the file and the line.

The layout (`read_multilabel`, registered as `multilabel`): `classes.txt`, `train.csv` and
`val.csv` at the root or in `annotations_dir`. Each record's `label_set` holds the row's labels,
untimed: every clip of a video has all of them.
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vidscale.data.annotations import (
    AnnotationError,
    MissingVideo,
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


@dataclass(frozen=True)
class MultiLabelRecord:
    path: Path
    labels: frozenset[int]


@dataclass(frozen=True)
class MultiLabelAnnotations:
    """The rows of one annotation file: videos found, and rows whose video is missing."""

    records: list[MultiLabelRecord] = field(default_factory=list)
    missing: list[MissingVideo] = field(default_factory=list)


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


def scan_multilabel_annotations(
    path: Path, *, classes: Sequence[str], root: Path | None = None
) -> MultiLabelAnnotations:
    """Parse a `path,labels` CSV; rows whose video is missing are returned, not raised.

    Malformed rows (wrong column count, empty path, an empty, unknown, out-of-range or repeated
    label) raise `AnnotationError` naming the file and line. Blank lines are ignored.
    """
    index = {name: i for i, name in enumerate(classes)}
    found = MultiLabelAnnotations()
    for where, video, raw in two_column_rows(path, header=HEADER, root=root):
        labels = parse_labels(raw, index, where=where)
        if video.is_file():
            found.records.append(MultiLabelRecord(video, labels))
        else:
            found.missing.append(MissingVideo(video, where))
    return found


def read_multilabel_annotations(
    path: Path,
    *,
    classes: Sequence[str],
    root: Path | None = None,
    skip_missing: bool = False,
) -> list[MultiLabelRecord]:
    """Records of a `path,labels` CSV (see `scan_multilabel_annotations`).

    A missing video raises `AnnotationError` naming the file and line, unless `skip_missing`:
    then each one is warned about (naming file and line) and left out.
    """
    found = scan_multilabel_annotations(path, classes=classes, root=root)
    if found.missing and not skip_missing:
        first = found.missing[0]
        more = f" (and {len(found.missing) - 1} more)" if len(found.missing) > 1 else ""
        raise AnnotationError(f"{first.where}: missing video {first.path}{more}")
    for item in found.missing:
        warnings.warn(f"{item.where}: missing video {item.path}; skipped", stacklevel=2)
    return found.records


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


@register_layout(MULTILABEL, multi_label=True)
def read_multilabel(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    ann = ann or root
    classes = read_class_names(ann / "classes.txt")
    out: dict[str, list[VideoRecord]] = {}
    for split in ("train", "val"):
        found = scan_multilabel_annotations(ann / f"{split}.csv", classes=classes)
        for lost in found.missing:
            missing.lost(lost.path, where=lost.where)
        out[split] = [
            VideoRecord(r.path, NO_SINGLE_LABEL, LabelSet(r.labels)) for r in found.records
        ]
    return classes, out["train"], out["val"]
