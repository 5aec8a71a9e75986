"""The Charades layout (`read_layout("charades")`) on files in the published format, written
here with the csv module."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from vidscale.data.annotations import AnnotationError, VideoRecord
from vidscale.data.label_sets import LabelSet
from vidscale.data.layouts import read_layout
from vidscale.data.layouts.charades import (
    CLASS_FILE,
    COLUMNS,
    ActionSegment,
    find_video_dir,
    labels_for_clip,
    read_charades_classes,
    scan_charades,
)

CLASS_LINES = [
    "c000 Holding some clothes",
    "c001 Putting clothes somewhere",
    "c002 Taking some clothes from somewhere",
    "c003 Throwing clothes somewhere",
]


def charades_row(video_id: str, actions: str, length: str = "30.00", **extra: str) -> list[str]:
    """A row in the published column order; free-text fields hold commas and quotes."""
    values = {
        "id": video_id,
        "subject": "HR43",
        "scene": "Kitchen",
        "quality": "6",
        "relevance": "7",
        "verified": "Yes",
        "script": 'A person cooks food, then says "done".',
        "objects": "food;stove;dish",
        "descriptions": "A person stands at the stove, stirring; then\nthey leave.",
        "actions": actions,
        "length": length,
        **extra,
    }
    return [values[c] for c in COLUMNS]


def write_csv(path: Path, rows: list[list[str]], *, header: tuple[str, ...] = COLUMNS) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def make_root(
    tmp_path: Path, train_rows: list[list[str]], *, videos: str = "Charades_v1_480"
) -> Path:
    (tmp_path / "Charades_v1_classes.txt").write_text("\n".join(CLASS_LINES) + "\n\n")
    write_csv(tmp_path / "Charades_v1_train.csv", train_rows)
    write_csv(tmp_path / "Charades_v1_test.csv", [charades_row("ZZZZZ", "c003 1.00 2.00")])
    (tmp_path / videos).mkdir()
    for video_id in ("46GP8", "N11GT", "0IH69", "ZZZZZ"):
        (tmp_path / videos / f"{video_id}.mp4").write_bytes(b"\0")
    return tmp_path


GOOD_ROWS = [
    charades_row("46GP8", "c001 11.90 21.20;c003 0.00 12.60;c001 25.00 28.10", "29.96"),
    charades_row("N11GT", "", "16.25"),  # no action: kept, every label negative
    charades_row("0IH69", " c002 3.0 3.0 ", "8.5"),
]


def label_set(record: VideoRecord) -> LabelSet:
    assert record.label == -1 and record.label_set is not None
    return record.label_set


def test_reads_ids_paths_label_sets_and_segments(tmp_path: Path) -> None:
    root = make_root(tmp_path, GOOD_ROWS)
    splits = read_layout("charades", root)
    assert splits.multi_label
    assert read_charades_classes(root / CLASS_FILE).codes == ("c000", "c001", "c002", "c003")
    assert splits.classes[0] == "Holding some clothes" and len(splits.classes) == 4
    assert [r.path.stem for r in splits.train] == ["46GP8", "N11GT", "0IH69"]
    first, empty, instant = splits.train
    assert first.path == root / "Charades_v1_480" / "46GP8.mp4"
    assert label_set(first).labels == {1, 3}
    assert label_set(first).segments == (
        ActionSegment(1, 11.9, 21.2),
        ActionSegment(3, 0.0, 12.6),
        ActionSegment(1, 25.0, 28.1),
    )
    assert label_set(empty) == LabelSet(frozenset(), ())
    assert label_set(instant).segments == (ActionSegment(2, 3.0, 3.0),)
    assert splits.missing == []
    # The validation split is the test file's.
    assert [(r.path.stem, label_set(r).labels) for r in splits.val] == [("ZZZZZ", {3})]
    # Lengths are read too (the layout's records do not carry them).
    classes = read_charades_classes(root / CLASS_FILE)
    found = scan_charades(
        root / "Charades_v1_train.csv", classes=classes, video_dir=find_video_dir(root)
    )
    assert [v.length_s for v in found.videos] == [29.96, 16.25, 8.5]


def test_video_folder_480p_first_then_full_size(tmp_path: Path) -> None:
    root = make_root(tmp_path, GOOD_ROWS, videos="Charades_v1")
    assert find_video_dir(root) == root / "Charades_v1"
    assert read_layout("charades", root).train[0].path == root / "Charades_v1" / "46GP8.mp4"
    (root / "Charades_v1_480").mkdir()
    assert find_video_dir(root) == root / "Charades_v1_480"
    with pytest.raises(AnnotationError, match="no video folder"):
        find_video_dir(root / "Charades_v1")


def test_missing_videos_raise_or_are_reported(tmp_path: Path) -> None:
    rows = [*GOOD_ROWS, charades_row("GONE1", "c000 1 2"), charades_row("GONE2", "")]
    root = make_root(tmp_path, rows)
    csv_path = root / "Charades_v1_train.csv"
    with pytest.raises(AnnotationError, match=rf"{csv_path}:8: missing video .*GONE1\.mp4"):
        read_layout("charades", root)
    splits = read_layout("charades", root, skip_missing=True)
    assert len(splits.train) == 3
    # Each description spans two lines, so row k starts on line 2k.
    videos = root / "Charades_v1_480"
    assert splits.missing == [
        (str(videos / "GONE1.mp4"), f"{csv_path}:8: missing video"),
        (str(videos / "GONE2.mp4"), f"{csv_path}:10: missing video"),
    ]


@pytest.mark.parametrize(
    ("actions", "length", "message"),
    [
        ("c001 1.0", "10", "expected 'cXXX start end', got 'c001 1.0'"),
        ("c001 1.0 2.0 3.0", "10", "expected 'cXXX start end'"),
        ("c009 1.0 2.0", "10", "unknown class 'c009'"),
        ("c001 one 2.0", "10", "start 'one' is not a number"),
        ("c001 1.0 nan", "10", "end 'nan' is not a time >= 0"),
        ("c001 -1.0 2.0", "10", "start '-1.0' is not a time >= 0"),
        ("c001 5.0 2.0", "10", "action 'c001 5.0 2.0' ends before it starts"),
        ("c001 1 2;;c002 3 4", "10", "empty action"),
        ("c001 1 2", "", "length '' is not a number"),
        ("c001 1 2", "long", "length 'long' is not a number"),
    ],
)
def test_a_malformed_row_names_file_and_line(
    tmp_path: Path, actions: str, length: str, message: str
) -> None:
    root = make_root(tmp_path, [GOOD_ROWS[0], charades_row("N11GT", actions, length)])
    with pytest.raises(AnnotationError, match=f"Charades_v1_train.csv:4: {message}"):
        read_layout("charades", root)
    with pytest.raises(AnnotationError, match=f"Charades_v1_train.csv:4: {message}"):
        read_layout("charades", root, skip_missing=True)  # not a missing video: still raised


def test_malformed_files(tmp_path: Path) -> None:
    root = make_root(tmp_path, GOOD_ROWS)
    csv_path = root / "Charades_v1_train.csv"

    def read() -> object:
        return read_layout("charades", root, skip_missing=True)

    write_csv(csv_path, [GOOD_ROWS[0], [*GOOD_ROWS[1], "extra"]])
    with pytest.raises(AnnotationError, match="train.csv:4: expected 11 columns, got 12"):
        read()
    write_csv(csv_path, [GOOD_ROWS[0], GOOD_ROWS[0]])
    with pytest.raises(
        AnnotationError, match="train.csv:4: duplicate id '46GP8' \\(first on line 2\\)"
    ):
        read()
    write_csv(csv_path, [charades_row(" ", "")])
    with pytest.raises(AnnotationError, match="train.csv:2: empty id"):
        read()
    write_csv(csv_path, [], header=("id", "subject", "length"))
    with pytest.raises(AnnotationError, match="train.csv:1: header lacks column\\(s\\) actions"):
        read()
    csv_path.write_text(",".join(COLUMNS) + '\nX,"unterminated\nY,\nZ\n')
    with pytest.raises(AnnotationError, match="train.csv:2: malformed CSV"):
        read()
    csv_path.write_text("")
    with pytest.raises(AnnotationError, match="train.csv:1: empty file"):
        read()
    csv_path.unlink()
    with pytest.raises(AnnotationError, match="train.csv: annotation file not found"):
        read()
    write_csv(csv_path, GOOD_ROWS)
    (root / "Charades_v1_test.csv").unlink()  # the validation split's file
    with pytest.raises(AnnotationError, match="Charades_v1_test.csv: annotation file not found"):
        read()


def test_blank_rows_are_skipped(tmp_path: Path) -> None:
    root = make_root(tmp_path, [GOOD_ROWS[0], [], GOOD_ROWS[1]])
    assert [r.path.stem for r in read_layout("charades", root).train] == ["46GP8", "N11GT"]


def test_malformed_class_lists(tmp_path: Path) -> None:
    path = tmp_path / "Charades_v1_classes.txt"
    path.write_text("c000 Holding some clothes\nc001\n")
    with pytest.raises(AnnotationError, match="classes.txt:2: expected 'cXXX class name'"):
        read_charades_classes(path)
    path.write_text("c000 Holding some clothes\n\nc000 Again\n")
    with pytest.raises(
        AnnotationError, match="classes.txt:3: duplicate class 'c000' \\(first on line 1\\)"
    ):
        read_charades_classes(path)
    path.write_text("\n")
    with pytest.raises(AnnotationError, match="no classes"):
        read_charades_classes(path)
    with pytest.raises(AnnotationError, match="class list not found"):
        read_charades_classes(tmp_path / "absent.txt")


SEGMENTS = (
    ActionSegment(1, 11.9, 21.2),
    ActionSegment(3, 0.0, 12.6),
    ActionSegment(0, 25.0, 28.1),
)


@pytest.mark.parametrize(
    ("start", "end", "labels"),
    [
        (0.0, 5.0, {3}),  # inside one action
        (12.0, 13.0, {1, 3}),  # both overlap here
        (21.3, 24.9, set()),  # between actions: all negative
        (21.2, 24.9, {1}),  # the first frame is the action's last instant
        (22.0, 25.0, {0}),  # the last frame is the action's first instant
        (5.0, 26.0, {0, 1, 3}),  # a long span covers every action
        (12.6, 12.6, {1, 3}),  # a one-frame clip
    ],
)
def test_labels_for_clip_keep_the_actions_overlapping_the_span(
    start: float, end: float, labels: set[int]
) -> None:
    assert labels_for_clip(SEGMENTS, start, end) == labels


def test_labels_for_clip_rejects_a_reversed_span() -> None:
    with pytest.raises(ValueError, match="clip ends"):
        labels_for_clip(SEGMENTS, 5.0, 4.0)
