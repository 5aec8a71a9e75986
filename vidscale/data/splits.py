"""The class list and the train/val items a run reads, per `data.source` (from the data
config alone): decoded videos listed by a layout (`layouts.read_layout`, the generic layout
included, with the run config's file names), or a `vidscale prepare`d directory.

Errors are one-line `ConfigError`s naming the field or the file.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.data.data_config import DataConfig
from vidscale.data.layouts import GenericFiles, read_layout
from vidscale.data.prepared.prepare import FLOW_DIR, open_prepared
from vidscale.data.sources import FlowSettings
from vidscale.errors import ConfigError


@dataclass(frozen=True)
class DataSplits:
    """Class names and the train/val items: `VideoRecord`s, or `ShardEntry`s when prepared.
    `multi_label`: the items have label sets (`label_set`), as `data.multi_label` says."""

    classes: list[str]
    train: list[Any]
    val: list[Any]
    multi_label: bool = False


def is_prepared(data: DataConfig) -> bool:
    """Whether `data.source` reads a prepared directory (shards, stream) rather than videos."""
    return data.source != "videos"


def read_splits(data: DataConfig) -> DataSplits:
    """Read the class list and both splits; errors name the file and line.

    Videos are read through `read_layout` for every `data.layout` (the generic layout's files
    are `data.classes`, `data.train_list` and `data.val_list`, under `data.root` unless
    absolute). A missing video is an `AnnotationError` naming file and line; with
    `data.skip_missing` each one is a warning naming file and line, and is left out.
    """
    if not data.root:
        raise ConfigError("data.root is not set (pass --data DIR or --set data.root=DIR)")
    root = Path(data.root)
    if not root.is_dir():
        raise ConfigError(f"data.root: {root} is not a directory")
    if is_prepared(data):
        try:
            prepared = open_prepared(root, modality=data.train_clip.modality)
        except FileNotFoundError as err:
            raise ConfigError(f"data.source={data.source}: {err}") from err
        return _checked(data, prepared.classes, prepared.train, prepared.val)
    splits = read_layout(
        data.layout,
        root,
        split=data.split,
        skip_missing=data.skip_missing,
        generic_files=GenericFiles(data.classes, data.train_list, data.val_list),
    )
    for path, reason in splits.missing:
        warnings.warn(f"{reason}: {path}", stacklevel=2)
    return _checked(data, splits.classes, splits.train, splits.val)


def recorded_flow(data: DataConfig) -> FlowSettings:
    """The optical-flow settings the run's input is computed with: those prepared flow was
    prepared with (so a run's saved config says how to compute its input from a raw video),
    else `data.media.flow`."""
    if not is_prepared(data) or data.train_clip.modality != "flow":
        return data.flow
    path = Path(data.root) / FLOW_DIR / "prepare_options.json"
    try:
        options = json.loads(path.read_text())["options"]
        return FlowSettings(
            method=options["method"],
            short_side=int(options["short_side"]),
            bound=float(options["bound"]),
        )
    except (OSError, KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"data.root: cannot read the flow options in {path}: {err}") from err


def _checked(
    data: DataConfig, classes: list[str], train: Sequence[Any], val: Sequence[Any]
) -> DataSplits:
    for name, items in (("training", train), ("validation", val)):
        if not items:
            raise ConfigError(f"data.root={data.root}: the {name} split has no videos")
    _check_label_kind(data, [*train, *val])
    return DataSplits(
        classes=classes, train=list(train), val=list(val), multi_label=data.multi_label
    )


def _check_label_kind(data: DataConfig, items: Sequence[Any]) -> None:
    """The items are multi-label (all with label sets) exactly when `data.multi_label` says."""
    with_sets = sum(item.label_set is not None for item in items)
    if 0 < with_sets < len(items):
        raise ConfigError(
            f"data.root={data.root}: {with_sets} of {len(items)} videos have label sets; "
            "a dataset's videos all have one or none"
        )
    multi = with_sets > 0
    if multi != data.multi_label:
        has = "label sets" if multi else "one label a video"
        raise ConfigError(
            f"data.root={data.root} has {has} but data.multi_label="
            f"{str(data.multi_label).lower()}: set data.multi_label={str(multi).lower()}"
        )
