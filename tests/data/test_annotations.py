"""The generic `path,label` format, read through the layout registry (`read_layout("generic")`)
and, with the run config's file names, through `splits.read_splits`: labels by name or index,
errors naming file and line, the one missing-file policy, custom and absolute file names."""

import dataclasses
import warnings
from pathlib import Path

import pytest

from vidscale.data.annotations import (
    HEADER,
    AnnotationError,
    VideoRecord,
    read_class_names,
    two_column_rows,
    write_annotations,
)
from vidscale.data.data_config import DataConfig
from vidscale.data.layouts import GenericFiles, LayoutSplits, read_layout
from vidscale.data.splits import read_splits


def make(tmp_path: Path, rows: str, *, classes: str = "jump\nrun\n\n") -> Path:
    """A generic dataset at `tmp_path`: `rows` in train.csv, an empty val.csv; a.mp4 and b.mp4
    on disk. Returns train.csv."""
    (tmp_path / "classes.txt").write_text(classes)
    (tmp_path / "a.mp4").write_bytes(b"x")
    (tmp_path / "b.mp4").write_bytes(b"x")
    (tmp_path / "val.csv").write_text("path,label\n")
    csv = tmp_path / "train.csv"
    csv.write_text("path,label\n" + rows)
    return csv


def read(
    root: Path,
    *,
    skip_missing: bool = False,
    annotations_dir: Path | None = None,
    generic_files: GenericFiles | None = None,
) -> LayoutSplits:
    return read_layout(
        "generic",
        root,
        skip_missing=skip_missing,
        annotations_dir=annotations_dir,
        generic_files=generic_files,
    )


def test_names_and_indices(tmp_path: Path) -> None:
    make(tmp_path, "a.mp4,run\n\nb.mp4,0\n")
    classes = read_class_names(tmp_path / "classes.txt")
    assert classes == ["jump", "run"]
    splits = read(tmp_path)
    assert splits.classes == classes
    assert splits.train == [
        VideoRecord(tmp_path / "a.mp4", 1),
        VideoRecord(tmp_path / "b.mp4", 0),
    ]
    assert splits.val == [] and splits.missing == []


def test_custom_and_absolute_file_names(tmp_path: Path) -> None:
    """Relative names are under the root (or `annotations_dir`), absolute ones where they say;
    a CSV's video paths are relative to the CSV's own directory."""
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "a.mp4").write_bytes(b"x")
    (lists / "t.csv").write_text('path,label\n"a.mp4",jump\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "names.txt").write_text("jump\n")
    (elsewhere / "v.csv").write_text("path,label\na.mp4,0\n")
    (elsewhere / "a.mp4").write_bytes(b"x")
    files = GenericFiles(
        classes=elsewhere / "names.txt", train="lists/t.csv", val=str(elsewhere / "v.csv")
    )
    splits = read(tmp_path, generic_files=files)
    assert splits.classes == ["jump"]
    assert splits.train == [VideoRecord(lists / "a.mp4", 0)]
    assert splits.val == [VideoRecord(elsewhere / "a.mp4", 0)]
    # Relative names under `annotations_dir` instead of the root.
    ann = GenericFiles(classes="names.txt", train="v.csv", val="v.csv")
    assert read(tmp_path, annotations_dir=elsewhere, generic_files=ann).train == splits.val


def test_rows_relative_to_a_given_root(tmp_path: Path) -> None:
    videos = tmp_path / "videos"
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "val.csv").write_text('path,label\n"a.mp4",jump\n')
    rows = list(two_column_rows(lists / "val.csv", header=HEADER, root=videos))
    assert rows == [(f"{lists / 'val.csv'}:2", videos / "a.mp4", "jump")]


def test_a_class_named_like_a_number_is_found_by_name(tmp_path: Path) -> None:
    make(tmp_path, "a.mp4,1\n", classes="1\n0\n")
    assert read(tmp_path).train[0].label == 0


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("a.mp4,run\nb.mp4,fly\n", "train.csv:3: unknown label 'fly'"),
        ("a.mp4,run\nb.mp4,7\n", "train.csv:3: label index 7 out of range for 2 classes"),
        ("a.mp4,-1\n", "train.csv:2: label index -1 out of range"),
        ("a.mp4,run,extra\n", "train.csv:2: expected 'path,label'"),
        ("a.mp4\n", "train.csv:2: expected 'path,label'"),
        ("a.mp4,run\n ,run\n", "train.csv:3: empty path"),
        ("a.mp4,run\nmissing.mp4,run\n", "train.csv:3: missing video .*missing.mp4"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, rows: str, message: str) -> None:
    make(tmp_path, rows)
    with pytest.raises(AnnotationError, match=message):
        read(tmp_path)


def test_skip_missing_lists_each_missing_video_and_continues(tmp_path: Path) -> None:
    csv = make(tmp_path, "a.mp4,run\nmissing.mp4,run\nb.mp4,jump\ngone.mp4,0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the layout lists, it does not warn
        splits = read(tmp_path, skip_missing=True)
    assert [r.path.name for r in splits.train] == ["a.mp4", "b.mp4"]
    assert splits.missing == [
        (str(tmp_path / "missing.mp4"), f"{csv}:3: missing video"),
        (str(tmp_path / "gone.mp4"), f"{csv}:5: missing video"),
    ]


def test_skip_missing_does_not_excuse_malformed_rows(tmp_path: Path) -> None:
    make(tmp_path, "missing.mp4,run\na.mp4,fly\n")
    with pytest.raises(AnnotationError, match="train.csv:3: unknown label"):
        read(tmp_path, skip_missing=True)


def test_missing_header_or_file(tmp_path: Path) -> None:
    make(tmp_path, "")
    (tmp_path / "t.csv").write_text("a.mp4,run\n")
    with pytest.raises(AnnotationError, match="t.csv:1: expected the header"):
        read(tmp_path, generic_files=GenericFiles(train="t.csv"))
    with pytest.raises(AnnotationError, match="nope.csv: annotation file not found"):
        read(tmp_path, generic_files=GenericFiles(val="nope.csv"))
    with pytest.raises(AnnotationError, match="none.txt: class list not found"):
        read(tmp_path, generic_files=GenericFiles(classes="none.txt"))


def test_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    make(tmp_path, "")
    (tmp_path / "classes.txt").write_text("jump\nrun\n", encoding="utf-8-sig")
    (tmp_path / "train.csv").write_text("path,label\na.mp4,jump\n", encoding="utf-8-sig")
    splits = read(tmp_path)
    assert splits.classes == ["jump", "run"]
    assert splits.train == [VideoRecord(tmp_path / "a.mp4", 0)]


def test_class_names_blank_lines_and_duplicates(tmp_path: Path) -> None:
    (tmp_path / "c.txt").write_text("\n a \n\nb\n")
    assert read_class_names(tmp_path / "c.txt") == ["a", "b"]
    (tmp_path / "d.txt").write_text("a\nb\n\na\n")
    with pytest.raises(AnnotationError, match="d.txt:4: duplicate class 'a' \\(first on line 1\\)"):
        read_class_names(tmp_path / "d.txt")
    (tmp_path / "e.txt").write_text("\n\n")
    with pytest.raises(AnnotationError, match="e.txt: no class names"):
        read_class_names(tmp_path / "e.txt")


def test_written_annotations_read_back(tmp_path: Path) -> None:
    make(tmp_path, "")
    (tmp_path / "a, b.mp4").write_bytes(b"x")  # a comma in a path is quoted
    write_annotations(tmp_path / "x.csv", [("a, b.mp4", "run")])
    splits = read(tmp_path, generic_files=GenericFiles(train="x.csv"))
    assert splits.train == [VideoRecord(tmp_path / "a, b.mp4", 1)]


# The run config's file names, read by `splits.read_splits` --------------------------------------


def custom_dataset(root: Path) -> DataConfig:
    """A generic dataset with its own file names (train list in a subfolder, an absolute class
    list), one listed training video missing; the run config that names them."""
    (root / "meta").mkdir()
    (root / "meta" / "labels.txt").write_text("jump\nrun\n")
    (root / "lists").mkdir()
    for name in ("a.mp4", "b.mp4", "c.mp4"):
        (root / "lists" / name).write_bytes(b"x")
    (root / "lists" / "tr.csv").write_text("path,label\na.mp4,run\ngone.mp4,jump\nb.mp4,0\n")
    (root / "lists" / "va.csv").write_text("path,label\nc.mp4,jump\n", encoding="utf-8-sig")
    return DataConfig(
        root=str(root),
        classes=str(root / "meta" / "labels.txt"),
        train_list="lists/tr.csv",
        val_list="lists/va.csv",
    )


def test_read_splits_reads_custom_generic_files_with_the_same_missing_policy(
    tmp_path: Path,
) -> None:
    data = custom_dataset(tmp_path)
    train_csv = tmp_path / "lists" / "tr.csv"
    with pytest.raises(AnnotationError, match=rf"{train_csv}:3: missing video .*gone\.mp4"):
        read_splits(data)
    with pytest.warns(UserWarning) as caught:
        splits = read_splits(dataclasses.replace(data, skip_missing=True))
    assert [str(w.message) for w in caught] == [
        f"{train_csv}:3: missing video: {tmp_path / 'lists' / 'gone.mp4'}"
    ]
    assert splits.classes == ["jump", "run"]
    assert splits.train == [
        VideoRecord(tmp_path / "lists" / "a.mp4", 1),
        VideoRecord(tmp_path / "lists" / "b.mp4", 0),
    ]
    assert splits.val == [VideoRecord(tmp_path / "lists" / "c.mp4", 0)]
