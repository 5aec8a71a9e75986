"""What one extraction reads: the videos in output order (`Item`s) and the settings a resumed
run must share with the run that started it (`Plan`).

From a dataset root (`--data DIR`) the videos are the layout's listed ones, read as `vidscale
eval` reads them (`train.resolve_eval_config`: the run's `data.layout`, file names and
`--set` overrides, with `data.root` = DIR), train split first, then val, each path once; their
labels are the dataset's class indices (-1 for a multi-label layout, whose videos have label
sets). Given as files (`VIDEO...`), the videos are those files in the order given, unlabelled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vidscale.data.clip import ClipSpec
from vidscale.data.splits import read_splits
from vidscale.errors import InputError
from vidscale.run.ref import resolve_eval_config

Split = Literal["train", "val", "all"]
NO_LABEL = -1


@dataclass(frozen=True)
class Item:
    """One video of the output, in row order: its path, class index (`NO_LABEL`: none) and the
    split it is listed in ("" for a video given as a file)."""

    path: str
    label: int = NO_LABEL
    split: str = ""


@dataclass(frozen=True)
class Listing:
    """The videos to extract and the dataset's class names (empty for bare files)."""

    items: list[Item]
    classes: list[str]


def dataset_items(run: Path, data: Path, *, split: Split, overrides: Sequence[str] = ()) -> Listing:
    """The videos `data` lists under the run's layout (module docstring); `split` picks train,
    val or both. Errors are `InputError`s naming the flag or file."""
    if not data.is_dir():
        raise InputError(f"--data: {data} is not a directory")
    # Features are read from the video files, whatever the run trained from (shards or not).
    cfg = resolve_eval_config(run, overrides=["data.source=videos", *overrides], data=data)
    splits = read_splits(cfg.data)
    chosen = {"train": [splits.train], "val": [splits.val], "all": [splits.train, splits.val]}
    names = {"train": ["train"], "val": ["val"], "all": ["train", "val"]}
    items: list[Item] = []
    seen: set[str] = set()
    for name, records in zip(names[split], chosen[split], strict=True):
        for record in records:
            path = str(record.path)
            if path in seen:
                continue
            seen.add(path)
            label = NO_LABEL if record.label_set is not None else int(record.label)
            items.append(Item(path, label, name))
    if not items:
        raise InputError(f"--data: {data} lists no videos in split {split!r}")
    return Listing(items, list(splits.classes))


def file_items(videos: Sequence[Path]) -> Listing:
    """The given video files, in order, unlabelled; a missing file is an `InputError`."""
    for video in videos:
        if not video.is_file():
            raise InputError(f"VIDEO: {video} is not a file")
    return Listing([Item(str(v)) for v in videos], [])


@dataclass(frozen=True)
class Plan:
    """Everything the output depends on: a rerun continues only under an equal plan.

    `checkpoint` is the weights file, `spec` the views (`data.eval_clip` with the chosen clips
    and crops), `items` the videos in row order, `precision` the arithmetic (features of two
    precisions never share one output)."""

    run: str
    checkpoint: str
    model: str
    spec: dict[str, Any]
    listing: Listing
    precision: str = "fp32"

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "checkpoint": self.checkpoint,
            "model": self.model,
            "spec": self.spec,
            "precision": self.precision,
            "classes": self.listing.classes,
            "items": [[i.path, i.label, i.split] for i in self.listing.items],
        }


def make_plan(
    run: Path,
    checkpoint: Path,
    model: str,
    spec: ClipSpec,
    listing: Listing,
    *,
    precision: str = "fp32",
) -> Plan:
    """The plan of an extraction; paths are made absolute, so a rerun from another working
    directory with the same absolute files agrees."""
    absolute = [dataclasses.replace(i, path=str(Path(i.path).resolve())) for i in listing.items]
    return Plan(
        run=str(Path(run).resolve()),
        checkpoint=str(Path(checkpoint).resolve()),
        model=model,
        spec=dataclasses.asdict(spec),
        listing=Listing(absolute, listing.classes),
        precision=precision,
    )
