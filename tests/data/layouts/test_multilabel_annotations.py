"""The `path,labels` multi-label CSV: round trip, label sets, and errors naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidscale.data.annotations import AnnotationError
from vidscale.data.layouts.multilabel import (
    read_multilabel_annotations,
    scan_multilabel_annotations,
    write_multilabel_annotations,
)

CLASSES = ["walk", "run", "jump"]


def make_videos(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"\0")


def test_round_trip_with_names_indices_and_an_empty_set(tmp_path: Path) -> None:
    make_videos(tmp_path, "v/a.mp4", "v/b.mp4", "v/c.mp4")
    write_multilabel_annotations(
        tmp_path / "train.csv",
        [("v/a.mp4", ["walk", "jump"]), ("v/b.mp4", []), ("v/c.mp4", ["run"])],
    )
    assert (tmp_path / "train.csv").read_text().splitlines() == [
        "path,labels",
        "v/a.mp4,walk;jump",
        "v/b.mp4,",
        "v/c.mp4,run",
    ]
    records = read_multilabel_annotations(tmp_path / "train.csv", classes=CLASSES)
    assert [(r.path.name, r.labels) for r in records] == [
        ("a.mp4", {0, 2}),
        ("b.mp4", set()),
        ("c.mp4", {1}),
    ]
    (tmp_path / "idx.csv").write_text("path,labels\nv/a.mp4, 2 ;walk\n\n")
    assert read_multilabel_annotations(tmp_path / "idx.csv", classes=CLASSES)[0].labels == {0, 2}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("v/a.mp4,walk;;run", "empty label in 'walk;;run'"),
        ("v/a.mp4,walk;swim", "unknown label 'swim'"),
        ("v/a.mp4,walk;7", "label index 7 out of range for 3 classes"),
        ("v/a.mp4,walk;0", "label '0' given twice"),
        ("v/a.mp4,walk,run", "expected 'path,labels' \\(2 columns\\), got 3"),
        (",walk", "empty path"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    make_videos(tmp_path, "v/a.mp4")
    (tmp_path / "bad.csv").write_text(f"path,labels\nv/a.mp4,run\n{line}\n")
    with pytest.raises(AnnotationError, match=f"bad.csv:3: {message}"):
        read_multilabel_annotations(tmp_path / "bad.csv", classes=CLASSES)


def test_bad_files_and_missing_videos(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("path,label\nv/a.mp4,run\n")
    with pytest.raises(AnnotationError, match="bad.csv:1: expected the header 'path,labels'"):
        read_multilabel_annotations(tmp_path / "bad.csv", classes=CLASSES)
    with pytest.raises(AnnotationError, match="annotation file not found"):
        read_multilabel_annotations(tmp_path / "none.csv", classes=CLASSES)
    (tmp_path / "gone.csv").write_text("path,labels\nv/x.mp4,run\nv/y.mp4,\n")
    with pytest.raises(AnnotationError, match=r"gone.csv:2: missing video .*x.mp4 \(and 1 more\)"):
        read_multilabel_annotations(tmp_path / "gone.csv", classes=CLASSES)
    found = scan_multilabel_annotations(tmp_path / "gone.csv", classes=CLASSES)
    assert [(m.path.name, m.where.rsplit(":", 1)[1]) for m in found.missing] == [
        ("x.mp4", "2"),
        ("y.mp4", "3"),
    ]
    with pytest.warns(UserWarning) as warned:
        kept = read_multilabel_annotations(
            tmp_path / "gone.csv", classes=CLASSES, skip_missing=True
        )
    assert kept == []
    assert [str(w.message).rsplit("/", 1)[1] for w in warned] == [
        "x.mp4; skipped",
        "y.mp4; skipped",
    ]
    with pytest.raises(ValueError, match="must not contain ';'"):
        write_multilabel_annotations(tmp_path / "w.csv", [("a.mp4", ["a;b"])])
