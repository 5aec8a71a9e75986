"""What the layout readers share: the missing-file policy and finding annotation files."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from vidscale.data.annotations import AnnotationError, VideoRecord

VIDEO_EXTENSIONS = (".mp4", ".webm", ".mkv", ".avi")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


class Missing:
    """The one missing-file policy, handed to every layout reader by `read_layout`: keeps a
    record whose file exists; otherwise raises an `AnnotationError` naming file and line, or
    with `skip` lists `(path, "file:line: reason")` in `items` (`LayoutSplits.missing`)."""

    def __init__(self, skip: bool, *, what: str = "video") -> None:
        self.skip = skip
        self.what = what
        self.items: list[tuple[str, str]] = []

    def keep(
        self, out: list[VideoRecord], video: Path | None, label: int, *, where: str, expected: Path
    ) -> None:
        if video is not None and video.is_file():
            out.append(VideoRecord(video, label))
        else:
            self.lost(expected, where=where)

    def lost(self, expected: Path, *, where: str) -> None:
        """A listed file that is not on disk: raised, or listed when skipping."""
        if not self.skip:
            raise AnnotationError(f"{where}: missing {self.what} {expected}")
        self.items.append((str(expected), f"{where}: missing {self.what}"))

    def note(self, path: Path, *, where: str, reason: str) -> None:
        """A problem that `skip_missing` lets pass: raised, or listed with `path`."""
        if not self.skip:
            raise AnnotationError(f"{where}: {reason}")
        self.items.append((str(path), f"{where}: {reason}"))


def check_split(split: int) -> int:
    if split not in (1, 2, 3):
        raise ValueError(f"split must be 1, 2 or 3, got {split}")
    return split


def first_dir(*candidates: Path) -> Path:
    """The first existing directory; the last candidate when none exists (errors name it)."""
    return next((c for c in candidates if c.is_dir()), candidates[-1])


def first_file(directory: Path, names: Sequence[str]) -> Path:
    for name in names:
        if (directory / name).is_file():
            return directory / name
    raise AnnotationError(f"{directory}: none of {', '.join(names)} found")


def only_file(directories: Sequence[Path], names: Sequence[str], *, what: str) -> Path:
    """The one file named any of `names` in the first of `directories` that holds one.

    Two or more there is an error, not a choice: a directory holding the annotations of two
    releases (the ActivityNet crawler ships Kinetics-400's and -600's side by side) must not
    silently train on whichever name comes first. Errors name every file and directory looked for.
    """
    for directory in directories:
        found = [directory / name for name in names if (directory / name).is_file()]
        if len(found) == 1:
            return found[0]
        if found:
            raise AnnotationError(
                f"{directory}: {len(found)} {what} annotation files "
                f"({', '.join(p.name for p in found)}): ambiguous, keep only one there"
            )
    where = " or ".join(str(d) for d in directories)
    raise AnnotationError(f"no {what} annotation file in {where}; looked for {', '.join(names)}")


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, stripped text) of the non-blank lines of a text file."""
    if not path.is_file():
        raise AnnotationError(f"{path}: annotation file not found")
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            yield lineno, line.strip()
