from pathlib import Path

import pytest

from vidscale.data.annotations import (
    AnnotationError,
    MissingVideo,
    VideoRecord,
    read_annotations,
    read_class_names,
    scan_annotations,
    write_annotations,
)


def make(tmp_path: Path, rows: str) -> Path:
    (tmp_path / "classes.txt").write_text("jump\nrun\n\n")
    (tmp_path / "a.mp4").write_bytes(b"x")
    (tmp_path / "b.mp4").write_bytes(b"x")
    csv = tmp_path / "train.csv"
    csv.write_text("path,label\n" + rows)
    return csv


def test_names_and_indices(tmp_path: Path) -> None:
    csv = make(tmp_path, "a.mp4,run\n\nb.mp4,0\n")
    classes = read_class_names(tmp_path / "classes.txt")
    assert classes == ["jump", "run"]
    assert read_annotations(csv, classes=classes) == [
        VideoRecord(tmp_path / "a.mp4", 1),
        VideoRecord(tmp_path / "b.mp4", 0),
    ]


def test_paths_relative_to_root(tmp_path: Path) -> None:
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "a.mp4").write_bytes(b"x")
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "val.csv").write_text('path,label\n"a.mp4",jump\n')
    records = read_annotations(lists / "val.csv", classes=["jump"], root=videos)
    assert records == [VideoRecord(videos / "a.mp4", 0)]


def test_a_class_named_like_a_number_is_found_by_name(tmp_path: Path) -> None:
    csv = make(tmp_path, "a.mp4,1\n")
    assert read_annotations(csv, classes=["1", "0"])[0].label == 0


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
    csv = make(tmp_path, rows)
    with pytest.raises(AnnotationError, match=message):
        read_annotations(csv, classes=["jump", "run"])


def test_skip_missing_warns_and_continues(tmp_path: Path) -> None:
    csv = make(tmp_path, "a.mp4,run\nmissing.mp4,run\nb.mp4,jump\ngone.mp4,0\n")
    with pytest.warns(UserWarning) as caught:
        records = read_annotations(csv, classes=["jump", "run"], skip_missing=True)
    assert [r.path.name for r in records] == ["a.mp4", "b.mp4"]
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert "train.csv:3: missing video" in messages[0] and "train.csv:5" in messages[1]
    found = scan_annotations(csv, classes=["jump", "run"])
    assert found.missing == [
        MissingVideo(tmp_path / "missing.mp4", f"{csv}:3"),
        MissingVideo(tmp_path / "gone.mp4", f"{csv}:5"),
    ]
    assert found.records == records


def test_skip_missing_does_not_excuse_malformed_rows(tmp_path: Path) -> None:
    csv = make(tmp_path, "missing.mp4,run\na.mp4,fly\n")
    with pytest.raises(AnnotationError, match="train.csv:3: unknown label"):
        read_annotations(csv, classes=["jump", "run"], skip_missing=True)


def test_missing_header_or_file(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("a.mp4,run\n")
    with pytest.raises(AnnotationError, match="t.csv:1: expected the header"):
        read_annotations(tmp_path / "t.csv", classes=["run"])
    with pytest.raises(AnnotationError, match="nope.csv: annotation file not found"):
        read_annotations(tmp_path / "nope.csv", classes=["run"])


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
    (tmp_path / "a, b.mp4").write_bytes(b"x")  # a comma in a path is quoted
    write_annotations(tmp_path / "x.csv", [("a, b.mp4", "run")])
    assert read_annotations(tmp_path / "x.csv", classes=["run"]) == [
        VideoRecord(tmp_path / "a, b.mp4", 0)
    ]
