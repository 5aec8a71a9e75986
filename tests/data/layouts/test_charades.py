"""The Charades reader on files in the published format, written here with the csv module."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from vidscale.data.annotations import AnnotationError
from vidscale.data.layouts.charades import (
    COLUMNS,
    ActionSegment,
    find_video_dir,
    labels_for_clip,
    read_charades,
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


def test_reads_ids_paths_label_sets_and_segments(tmp_path: Path) -> None:
    root = make_root(tmp_path, GOOD_ROWS)
    split = read_charades(root, "train")
    assert split.classes.codes == ("c000", "c001", "c002", "c003")
    assert split.classes.names[0] == "Holding some clothes"
    assert [v.video_id for v in split.videos] == ["46GP8", "N11GT", "0IH69"]
    first, empty, instant = split.videos
    assert first.path == root / "Charades_v1_480" / "46GP8.mp4"
    assert first.labels == {1, 3}
    assert first.segments == (
        ActionSegment(1, 11.9, 21.2),
        ActionSegment(3, 0.0, 12.6),
        ActionSegment(1, 25.0, 28.1),
    )
    assert first.length_s == 29.96
    assert (empty.labels, empty.segments, empty.length_s) == (frozenset(), (), 16.25)
    assert instant.segments == (ActionSegment(2, 3.0, 3.0),)
    assert split.missing == []
    test = read_charades(root, "test")
    assert [(v.video_id, v.labels) for v in test.videos] == [("ZZZZZ", {3})]


def test_video_folder_480p_first_then_full_size(tmp_path: Path) -> None:
    root = make_root(tmp_path, GOOD_ROWS, videos="Charades_v1")
    assert find_video_dir(root) == root / "Charades_v1"
    assert read_charades(root, "train").videos[0].path == root / "Charades_v1" / "46GP8.mp4"
    (root / "Charades_v1_480").mkdir()
    assert find_video_dir(root) == root / "Charades_v1_480"
    with pytest.raises(AnnotationError, match="no video folder"):
        find_video_dir(root / "Charades_v1")


def test_missing_videos_raise_or_are_reported(tmp_path: Path) -> None:
    rows = [*GOOD_ROWS, charades_row("GONE1", "c000 1 2"), charades_row("GONE2", "")]
    root = make_root(tmp_path, rows)
    csv_path = root / "Charades_v1_train.csv"
    with pytest.raises(
        AnnotationError, match=rf"{csv_path}:8: missing video .*GONE1.mp4 \(and 1 more\)"
    ):
        read_charades(root, "train")
    with pytest.warns(UserWarning) as warned:
        split = read_charades(root, "train", skip_missing=True)
    assert [str(w.message).endswith(f"GONE{k}.mp4; skipped") for k, w in enumerate(warned, 1)] == [
        True,
        True,
    ]
    assert len(split.videos) == 3
    # Each description spans two lines, so row k starts on line 2k.
    assert [(m.path.name, m.where) for m in split.missing] == [
        ("GONE1.mp4", f"{csv_path}:8"),
        ("GONE2.mp4", f"{csv_path}:10"),
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
        read_charades(root, "train")


def test_malformed_files(tmp_path: Path) -> None:
    root = make_root(tmp_path, GOOD_ROWS)
    classes = read_charades_classes(root / "Charades_v1_classes.txt")
    csv_path = root / "bad.csv"

    def scan() -> object:
        return scan_charades(csv_path, classes=classes, video_dir=root / "Charades_v1_480")

    write_csv(csv_path, [GOOD_ROWS[0], [*GOOD_ROWS[1], "extra"]])
    with pytest.raises(AnnotationError, match="bad.csv:4: expected 11 columns, got 12"):
        scan()
    write_csv(csv_path, [GOOD_ROWS[0], GOOD_ROWS[0]])
    with pytest.raises(
        AnnotationError, match="bad.csv:4: duplicate id '46GP8' \\(first on line 2\\)"
    ):
        scan()
    write_csv(csv_path, [charades_row(" ", "")])
    with pytest.raises(AnnotationError, match="bad.csv:2: empty id"):
        scan()
    write_csv(csv_path, [], header=("id", "subject", "length"))
    with pytest.raises(AnnotationError, match="bad.csv:1: header lacks column\\(s\\) actions"):
        scan()
    csv_path.write_text(",".join(COLUMNS) + '\nX,"unterminated\nY,\nZ\n')
    with pytest.raises(AnnotationError, match="bad.csv:2: malformed CSV"):
        scan()
    csv_path.write_text("")
    with pytest.raises(AnnotationError, match="bad.csv:1: empty file"):
        scan()
    with pytest.raises(AnnotationError, match="nothere.csv: annotation file not found"):
        scan_charades(root / "nothere.csv", classes=classes, video_dir=root)
    with pytest.raises(AnnotationError, match="unknown Charades split 'val'"):
        read_charades(root, "val")  # type: ignore[arg-type]


def test_blank_rows_are_skipped(tmp_path: Path) -> None:
    root = make_root(tmp_path, [GOOD_ROWS[0], [], GOOD_ROWS[1]])
    assert [v.video_id for v in read_charades(root, "train").videos] == ["46GP8", "N11GT"]


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
