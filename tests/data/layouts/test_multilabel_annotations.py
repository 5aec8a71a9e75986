"""The `path,labels` multi-label CSV, read through the `multilabel` layout (`read_layout`):
round trip, label sets, errors naming file and line, the one missing-file policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidscale.data.annotations import AnnotationError, VideoRecord
from vidscale.data.layouts import LayoutSplits, read_layout
from vidscale.data.layouts.multilabel import write_multilabel_annotations

CLASSES = ["walk", "run", "jump"]


def make_videos(root: Path, *names: str) -> None:
    """The videos, and the layout's class list and (empty) split files where none is yet."""
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"\0")
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    for split in ("train", "val"):
        if not (root / f"{split}.csv").exists():
            (root / f"{split}.csv").write_text("path,labels\n")


def read(root: Path, *, skip_missing: bool = False) -> LayoutSplits:
    return read_layout("multilabel", root, skip_missing=skip_missing)


def labels(record: VideoRecord) -> frozenset[int]:
    assert record.label == -1 and record.label_set is not None
    return record.label_set.labels


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
    splits = read(tmp_path)
    assert splits.multi_label and splits.classes == CLASSES
    assert [(r.path, labels(r)) for r in splits.train] == [
        (tmp_path / "v" / "a.mp4", {0, 2}),
        (tmp_path / "v" / "b.mp4", set()),
        (tmp_path / "v" / "c.mp4", {1}),
    ]
    (tmp_path / "val.csv").write_text("path,labels\nv/a.mp4, 2 ;walk\n\n", encoding="utf-8-sig")
    assert [labels(r) for r in read(tmp_path).val] == [{0, 2}]


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
    (tmp_path / "train.csv").write_text(f"path,labels\nv/a.mp4,run\n{line}\n")
    for skip_missing in (False, True):  # not a missing video: raised either way
        with pytest.raises(AnnotationError, match=f"train.csv:3: {message}"):
            read(tmp_path, skip_missing=skip_missing)


def test_bad_files_and_missing_videos(tmp_path: Path) -> None:
    make_videos(tmp_path)
    (tmp_path / "train.csv").write_text("path,label\nv/a.mp4,run\n")
    with pytest.raises(AnnotationError, match="train.csv:1: expected the header 'path,labels'"):
        read(tmp_path)
    (tmp_path / "train.csv").write_text("path,labels\n")
    (tmp_path / "val.csv").unlink()
    with pytest.raises(AnnotationError, match="val.csv: annotation file not found"):
        read(tmp_path)
    gone = tmp_path / "val.csv"
    gone.write_text("path,labels\nv/x.mp4,run\nv/y.mp4,\n")
    with pytest.raises(AnnotationError, match=r"val.csv:2: missing video .*x\.mp4"):
        read(tmp_path)
    splits = read(tmp_path, skip_missing=True)
    assert splits.val == []
    assert splits.missing == [
        (str(tmp_path / "v" / "x.mp4"), f"{gone}:2: missing video"),
        (str(tmp_path / "v" / "y.mp4"), f"{gone}:3: missing video"),
    ]
    with pytest.raises(ValueError, match="must not contain ';'"):
        write_multilabel_annotations(tmp_path / "w.csv", [("a.mp4", ["a;b"])])
