"""The layout registry: each dataset layout registers its reader once, by name (`data.layout`).

A reader takes the dataset root, the annotation directory the caller names (None: the layout's
own places), the `Missing` policy and the split number, and returns the class names in label
order with the train and validation records (`Split`). `read_layout` (in the package) wraps the
result in `LayoutSplits`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from vidscale.data.annotations import VideoRecord
from vidscale.data.layouts.common import Missing

Media = Literal["video", "image"]
Split = tuple[list[str], list[VideoRecord], list[VideoRecord]]


@dataclass(frozen=True)
class LayoutSplits:
    """`media` says what the records' files are: "image" records are one-frame clips.
    `multi_label`: every record has a `label_set` (and `label` -1)."""

    classes: list[str]
    train: list[VideoRecord]
    val: list[VideoRecord]
    missing: list[tuple[str, str]] = field(default_factory=list)
    media: Media = "video"
    multi_label: bool = False


class LayoutReader(Protocol):
    def __call__(self, root: Path, ann: Path | None, missing: Missing, split: int, /) -> Split:
        """The classes and both splits of the dataset at `root`; `split` is 1-3 where the
        layout has numbered splits (`Layout.numbered_splits`) and unused elsewhere."""
        ...


@dataclass(frozen=True)
class Layout:
    """A registered layout: its reader, what its files are, whether it has splits 1-3, and
    whether its videos have label sets (`multi_label`: `data.multi_label` must say so)."""

    name: str
    read: LayoutReader
    media: Media = "video"
    numbered_splits: bool = False
    multi_label: bool = False


#: Every registered layout by name, in registration order.
LAYOUTS_BY_NAME: dict[str, Layout] = {}


def register_layout(
    name: str, *, media: Media = "video", numbered_splits: bool = False, multi_label: bool = False
) -> Callable[[LayoutReader], LayoutReader]:
    """Function decorator: register a reader as `data.layout=name`."""

    def register(read: LayoutReader) -> LayoutReader:
        if name in LAYOUTS_BY_NAME:
            raise ValueError(f"layout {name!r} registered twice")
        LAYOUTS_BY_NAME[name] = Layout(
            name, read, media=media, numbered_splits=numbered_splits, multi_label=multi_label
        )
        return read

    return register
