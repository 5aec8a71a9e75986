from pathlib import Path

import pytest

from vidscale.data.annotations import (
    AnnotationError,
    VideoRecord,
    read_annotations,
    read_class_names,
)


def make(tmp_path: Path, rows: str) -> Path:
    (tmp_path / "classes.txt").write_text("jump\nrun\n\n")
    (tmp_path / "a.mp4").write_bytes(b"x")
    (tmp_path / "b.mp4").write_bytes(b"x")
    csv = tmp_path / "train.csv"
    csv.write_text("path,label\n" + rows)
    return csv


def test_names_and_indices(tmp_path: Path) -> None:
    csv = make(tmp_path, "a.mp4,run\nb.mp4,0\n")
    classes = read_class_names(tmp_path / "classes.txt")
    assert classes == ["jump", "run"]
    assert read_annotations(csv, classes=classes) == [
        VideoRecord(tmp_path / "a.mp4", 1),
        VideoRecord(tmp_path / "b.mp4", 0),
    ]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("a.mp4,run\nb.mp4,fly\n", "train.csv:3: unknown label 'fly'"),
        ("a.mp4,run\nb.mp4,7\n", "train.csv:3: label index 7 out of range"),
        ("a.mp4,run,extra\n", "train.csv:2: expected 'path,label'"),
        ("a.mp4,run\nmissing.mp4,run\n", "train.csv:3: missing video"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, rows: str, message: str) -> None:
    csv = make(tmp_path, rows)
    with pytest.raises(AnnotationError, match=message):
        read_annotations(csv, classes=["jump", "run"])


def test_skip_missing_warns_and_continues(tmp_path: Path) -> None:
    csv = make(tmp_path, "a.mp4,run\nmissing.mp4,run\n")
    with pytest.warns(UserWarning, match="train.csv:3"):
        records = read_annotations(csv, classes=["jump", "run"], skip_missing=True)
    assert [r.path.name for r in records] == ["a.mp4"]


def test_duplicate_class_rejected(tmp_path: Path) -> None:
    (tmp_path / "c.txt").write_text("a\nb\na\n")
    with pytest.raises(AnnotationError, match="c.txt:3: duplicate class 'a'"):
        read_class_names(tmp_path / "c.txt")


def test_missing_header(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("a.mp4,run\n")
    with pytest.raises(AnnotationError, match="t.csv:1: expected the header"):
        read_annotations(tmp_path / "t.csv", classes=["run"])
