"""Annotation files: a class-name list and `path,label` CSV files.

The generic format (what `vidscale synth` writes and what every standard layout converts to):
`classes.txt` has one class name per line (index = line number from 0); a split CSV has the header
`path,label`, the path relative to the CSV's directory (or to `root`) and the label as a class
name or an integer index. Every error names the file and the line.
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class AnnotationError(ValueError):
    """A malformed annotation file; the message names the file and line."""


@dataclass(frozen=True)
class VideoRecord:
    path: Path
    label: int


def read_class_names(path: Path) -> list[str]:
    """Class names, one per line; blank lines ignored; duplicates rejected."""
    path = Path(path)
    if not path.is_file():
        raise AnnotationError(f"{path}: class list not found")
    names: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        name = line.strip()
        if not name:
            continue
        if name in seen:
            raise AnnotationError(
                f"{path}:{lineno}: duplicate class {name!r} (first on line {seen[name]})"
            )
        seen[name] = lineno
        names.append(name)
    if not names:
        raise AnnotationError(f"{path}: no class names")
    return names


def parse_label(raw: str, classes: Sequence[str], *, where: str) -> int:
    """A label given as a class name or an integer index, checked against `classes`."""
    raw = raw.strip()
    index = {name: i for i, name in enumerate(classes)}
    if raw in index:
        return index[raw]
    if raw.lstrip("-").isdigit():
        value = int(raw)
        if not 0 <= value < len(classes):
            raise AnnotationError(
                f"{where}: label index {value} out of range for {len(classes)} classes"
            )
        return value
    raise AnnotationError(f"{where}: unknown label {raw!r}")


def read_annotations(
    path: Path,
    *,
    classes: Sequence[str],
    root: Path | None = None,
    skip_missing: bool = False,
) -> list[VideoRecord]:
    """Records of a `path,label` CSV. A missing video is an error unless `skip_missing`
    (then it is warned about, naming file and line, and left out)."""
    path = Path(path)
    if not path.is_file():
        raise AnnotationError(f"{path}: annotation file not found")
    base = Path(root) if root is not None else path.parent
    records: list[VideoRecord] = []
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows or [c.strip() for c in rows[0]] != ["path", "label"]:
        raise AnnotationError(f"{path}:1: expected the header 'path,label'")
    for lineno, row in enumerate(rows[1:], start=2):
        where = f"{path}:{lineno}"
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2 or not row[0].strip():
            raise AnnotationError(f"{where}: expected 'path,label', got {','.join(row)!r}")
        label = parse_label(row[1], classes, where=where)
        video = base / row[0].strip()
        if not video.is_file():
            if skip_missing:
                warnings.warn(f"{where}: missing video {video}; skipped", stacklevel=2)
                continue
            raise AnnotationError(f"{where}: missing video {video}")
        records.append(VideoRecord(video, label))
    return records


def write_annotations(path: Path, rows: Sequence[tuple[str, str]]) -> None:
    """Write a `path,label` CSV (paths as given, relative to the CSV's directory)."""
    with Path(path).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label"])
        writer.writerows(rows)
