"""Annotation files: a class-name list and `path,label` CSV files, and the records they list.

The generic format (what `vidscale synth` writes and what every standard layout converts to):
`classes.txt` has one class name per line (index = position among the non-blank lines, from 0);
a split CSV has the header `path,label`, the path relative to the CSV's directory and the label
as a class name or an integer index. Every error names the file and the line.

This module parses (`read_class_names`, `two_column_rows`, `parse_label`) and writes
(`write_annotations`); datasets are read through `vidscale.data.layouts.read_layout`, whose
`generic` layout reads these files and applies the one missing-file policy (`layouts.common`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vidscale.data.label_sets import LabelSet
from vidscale.errors import InputError

HEADER = ("path", "label")


class AnnotationError(InputError):
    """A malformed annotation file; the message names the file and line."""


@dataclass(frozen=True)
class VideoRecord:
    """A listed video. Single-label: `label` is its class and `label_set` None. Multi-label
    (`label_set` given, possibly with no positive): `label` is `NO_SINGLE_LABEL`."""

    path: Path
    label: int
    label_set: LabelSet | None = None


@dataclass(frozen=True)
class MissingVideo:
    """A row whose video file does not exist; `where` is `file:line`. A layout reader hands it to
    its `layouts.common.Missing` policy."""

    path: Path
    where: str


def read_class_names(path: Path) -> list[str]:
    """Class names, one per line; blank lines ignored; duplicates rejected."""
    path = Path(path)
    if not path.is_file():
        raise AnnotationError(f"{path}: class list not found")
    names: list[str] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        name = line.strip()
        if not name:
            continue
        if name in first_line:
            raise AnnotationError(
                f"{path}:{lineno}: duplicate class {name!r} (first on line {first_line[name]})"
            )
        first_line[name] = lineno
        names.append(name)
    if not names:
        raise AnnotationError(f"{path}: no class names")
    return names


def parse_label(raw: str, classes: Sequence[str] | Mapping[str, int], *, where: str) -> int:
    """A label given as a class name or an integer index, checked against `classes` (the class
    names in order, or a name -> index mapping, which saves rebuilding it per row).

    A name wins over an index, so a class literally called "3" is found by name.
    """
    index = classes if isinstance(classes, Mapping) else {n: i for i, n in enumerate(classes)}
    raw = raw.strip()
    if raw in index:
        return index[raw]
    if raw.lstrip("+-").isdigit():
        value = int(raw)
        if not 0 <= value < len(index):
            raise AnnotationError(
                f"{where}: label index {value} out of range for {len(index)} classes"
            )
        return value
    raise AnnotationError(f"{where}: unknown label {raw!r}")


def two_column_rows(
    path: Path, *, header: tuple[str, str], root: Path | None
) -> Iterator[tuple[str, Path, str]]:
    """`(file:line, video path, second column)` of each non-blank row of a two-column CSV with
    `header`, the video resolved against `root` (default: the file's folder). A missing file,
    another header, another column count or an empty path is an `AnnotationError` naming the
    file and line."""
    path = Path(path)
    if not path.is_file():
        raise AnnotationError(f"{path}: annotation file not found")
    base = Path(root) if root is not None else path.parent
    with path.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    names = ",".join(header)
    if not rows or tuple(c.strip() for c in rows[0]) != header:
        raise AnnotationError(f"{path}:1: expected the header '{names}'")
    for lineno, row in enumerate(rows[1:], start=2):
        where = f"{path}:{lineno}"
        if all(not c.strip() for c in row):
            continue
        if len(row) != 2:
            raise AnnotationError(f"{where}: expected '{names}' (2 columns), got {len(row)}")
        if not row[0].strip():
            raise AnnotationError(f"{where}: empty path")
        yield where, base / row[0].strip(), row[1]


def write_annotations(path: Path, rows: Sequence[tuple[str, str]]) -> None:
    """Write a `path,label` CSV (paths as given, relative to the CSV's directory)."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(rows)
