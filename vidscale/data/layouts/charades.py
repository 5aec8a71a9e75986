"""The Charades layout as the Allen Institute publishes it (Sigurdsson et al., ECCV 2016).

- `Charades_v1_classes.txt`: one class a line, `c000 Holding some clothes` (a code, a space, the
  name); a class's index is its position among the non-blank lines (157 classes, c000 = 0).
- `Charades_v1_train.csv` / `Charades_v1_test.csv`: a header row naming the columns
  `id,subject,scene,quality,relevance,verified,script,objects,descriptions,actions,length`
  (free-text fields quoted, commas inside them); only `id`, `actions` and `length` are read.
  `actions` is `;`-separated `cXXX start end` segments in seconds, e.g.
  `c092 11.90 21.20;c147 0.00 12.60`, and may be empty (a video with no action is kept: all of
  its labels are negative); `length` is the video's duration in seconds.
- Videos: `Charades_v1_480/<id>.mp4` (the 480p release) or `Charades_v1/<id>.mp4`.

A video's label set is the union of its segments' classes. For a clip, `labels_for_clip` (from
`label_sets`, where the layout's records keep their segments) keeps
the actions that overlap the time span of the sampled frames, which is PySlowFast's training
target (`slowfast/datasets/charades.py`): it reads Charades as 24 fps frames, each labelled with
the actions whose interval contains it, and a clip's target is the union of the labels of every
frame from its first sampled frame to its last (`utils.aggregate_labels`); at validation and test
it is the whole video's label set. Malformed lines raise `AnnotationError` naming the file and
line; `scan_charades` returns the videos missing on disk as `MissingVideo`s.

The layout (`read_charades_layout`, registered as `charades`, read with `read_layout`): the
files above at the root or in `annotations_dir`, the train split from the train file and the
validation split from the test file. Each record's `label_set` holds the video's actions and
their segments in seconds. A missing video goes to the layouts' one missing-file policy
(`common.Missing`): an `AnnotationError` naming file and line, or with `skip_missing` listed in
`LayoutSplits.missing`.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from vidscale.data.annotations import AnnotationError, MissingVideo, VideoRecord
from vidscale.data.label_sets import NO_SINGLE_LABEL, ActionSegment, LabelSet
from vidscale.data.label_sets import labels_for_clip as labels_for_clip
from vidscale.data.layouts.common import Missing
from vidscale.data.layouts.registry import Split, register_layout

CLASS_FILE = "Charades_v1_classes.txt"
SPLIT_FILES = {"train": "Charades_v1_train.csv", "test": "Charades_v1_test.csv"}
VIDEO_DIRS = ("Charades_v1_480", "Charades_v1")  # the first one present is used
COLUMNS = (
    "id",
    "subject",
    "scene",
    "quality",
    "relevance",
    "verified",
    "script",
    "objects",
    "descriptions",
    "actions",
    "length",
)
READ_COLUMNS = ("id", "actions", "length")


@dataclass(frozen=True)
class CharadesClasses:
    """Class codes (`c000`) and names, both in label order."""

    codes: tuple[str, ...]
    names: tuple[str, ...]

    def index(self) -> dict[str, int]:
        return {code: i for i, code in enumerate(self.codes)}


@dataclass(frozen=True)
class CharadesVideo:
    """`labels`: the classes of `segments`, empty for a video with no action."""

    video_id: str
    path: Path
    labels: frozenset[int]
    segments: tuple[ActionSegment, ...]
    length_s: float


@dataclass(frozen=True)
class CharadesAnnotations:
    """The videos of one split file found on disk, and the rows whose video is missing."""

    videos: list[CharadesVideo] = field(default_factory=list)
    missing: list[MissingVideo] = field(default_factory=list)


def read_charades_classes(path: Path) -> CharadesClasses:
    """Codes and names of `Charades_v1_classes.txt`; blank lines ignored, duplicate codes and
    lines without a name rejected."""
    path = Path(path)
    if not path.is_file():
        raise AnnotationError(f"{path}: class list not found")
    codes: list[str] = []
    names: list[str] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        if not line.strip():
            continue
        code, _, name = line.strip().partition(" ")
        if not name.strip():
            raise AnnotationError(f"{path}:{lineno}: expected 'cXXX class name', got {line!r}")
        if code in first_line:
            raise AnnotationError(
                f"{path}:{lineno}: duplicate class {code!r} (first on line {first_line[code]})"
            )
        first_line[code] = lineno
        codes.append(code)
        names.append(name.strip())
    if not codes:
        raise AnnotationError(f"{path}: no classes")
    return CharadesClasses(tuple(codes), tuple(names))


def find_video_dir(root: Path) -> Path:
    """The video folder under `root`: the first of `VIDEO_DIRS` that exists."""
    for name in VIDEO_DIRS:
        if (Path(root) / name).is_dir():
            return Path(root) / name
    raise AnnotationError(f"{root}: no video folder (expected one of {', '.join(VIDEO_DIRS)})")


def _seconds(raw: str, *, what: str, where: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise AnnotationError(f"{where}: {what} {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise AnnotationError(f"{where}: {what} {raw!r} is not a time >= 0")
    return value


def parse_actions(raw: str, index: dict[str, int], *, where: str) -> tuple[ActionSegment, ...]:
    """The segments of an `actions` field (`cXXX start end;...`; empty means none)."""
    segments = []
    for entry in (e.strip() for e in raw.split(";")):
        if not entry:
            if raw.strip():
                raise AnnotationError(f"{where}: empty action in {raw!r}")
            continue
        parts = entry.split()
        if len(parts) != 3:
            raise AnnotationError(f"{where}: expected 'cXXX start end', got {entry!r}")
        code, start, end = parts
        if code not in index:
            raise AnnotationError(f"{where}: unknown class {code!r} in {entry!r}")
        start_s = _seconds(start, what="start", where=where)
        end_s = _seconds(end, what="end", where=where)
        if end_s < start_s:
            raise AnnotationError(f"{where}: action {entry!r} ends before it starts")
        segments.append(ActionSegment(index[code], start_s, end_s))
    return tuple(segments)


def _column_positions(header: list[str], path: Path) -> dict[str, int]:
    names = [c.strip() for c in header]
    absent = [c for c in READ_COLUMNS if c not in names]
    if absent:
        raise AnnotationError(
            f"{path}:1: header lacks column(s) {', '.join(absent)} (expected {','.join(COLUMNS)})"
        )
    return {name: names.index(name) for name in READ_COLUMNS}


def _read_rows(path: Path) -> list[tuple[int, list[str]]]:
    """The CSV's rows, each with the line it starts on (a quoted field may span lines)."""
    if not path.is_file():
        raise AnnotationError(f"{path}: annotation file not found")
    rows = []
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f, strict=True)
        next_line = 1
        try:
            for row in reader:
                rows.append((next_line, row))
                next_line = reader.line_num + 1
        except csv.Error as error:
            # The row that started on `next_line` is the one the reader could not finish.
            raise AnnotationError(f"{path}:{next_line}: malformed CSV ({error})") from None
    return rows


def scan_charades(path: Path, *, classes: CharadesClasses, video_dir: Path) -> CharadesAnnotations:
    """Parse one Charades split CSV; rows whose video is missing are returned, not raised.

    Raises `AnnotationError` naming the file and line for a header without `id`, `actions` or
    `length`, a row with a different column count, an empty or repeated id, a malformed action
    (not `cXXX start end`, an unknown code, a time that is not a number >= 0, an end before its
    start) and a `length` that is not a number >= 0. Blank lines are ignored.
    """
    path = Path(path)
    rows = _read_rows(path)
    if not rows:
        raise AnnotationError(f"{path}:1: empty file (expected the header {','.join(COLUMNS)})")
    header = rows[0][1]
    column = _column_positions(header, path)
    index = classes.index()
    found = CharadesAnnotations()
    first_line: dict[str, int] = {}
    for lineno, row in rows[1:]:
        where = f"{path}:{lineno}"
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise AnnotationError(f"{where}: expected {len(header)} columns, got {len(row)}")
        video_id = row[column["id"]].strip()
        if not video_id:
            raise AnnotationError(f"{where}: empty id")
        if video_id in first_line:
            raise AnnotationError(
                f"{where}: duplicate id {video_id!r} (first on line {first_line[video_id]})"
            )
        first_line[video_id] = lineno
        segments = parse_actions(row[column["actions"]], index, where=where)
        length_s = _seconds(row[column["length"]].strip(), what="length", where=where)
        video = Path(video_dir) / f"{video_id}.mp4"
        if not video.is_file():
            found.missing.append(MissingVideo(video, where))
            continue
        labels = frozenset(s.label for s in segments)
        found.videos.append(CharadesVideo(video_id, video, labels, segments, length_s))
    return found


@register_layout("charades", multi_label=True)
def read_charades_layout(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    ann = ann or root
    classes = read_charades_classes(ann / CLASS_FILE)
    videos = find_video_dir(root)
    out: dict[str, list[VideoRecord]] = {}
    for split, name in (("train", SPLIT_FILES["train"]), ("val", SPLIT_FILES["test"])):
        found = scan_charades(ann / name, classes=classes, video_dir=videos)
        for lost in found.missing:
            missing.lost(lost.path, where=lost.where)
        out[split] = [
            VideoRecord(v.path, NO_SINGLE_LABEL, LabelSet(v.labels, v.segments))
            for v in found.videos
        ]
    return list(classes.names), out["train"], out["val"]
