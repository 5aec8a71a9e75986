"""A run's data as its config names it: the splits read from disk, and the config completed by
what they determine (the class count, prepared flow's settings). What every command that builds
from a run's dataset starts with: training, evaluation, feature extraction, the studies.
"""

from __future__ import annotations

from dataclasses import replace

from vidscale.config import ConfigError, RunConfig
from vidscale.data.splits import DataSplits, read_splits, recorded_flow


def load_splits(cfg: RunConfig) -> DataSplits:
    """The run's class list and train/val items (`data.splits.read_splits`), for a caller that
    only counts them; a command that builds from them starts with `load_data`."""
    return read_splits(cfg.data)


def load_data(cfg: RunConfig) -> tuple[RunConfig, DataSplits]:
    """The run's splits, and `cfg` with what they determine (`resolve_data`): what every
    command that builds from a dataset starts with."""
    splits = read_splits(cfg.data)
    return resolve_data(cfg, splits.classes), splits


def resolve_data(cfg: RunConfig, classes: list[str]) -> RunConfig:
    """The config with what the data determines: the class count (`resolve_num_classes`) and,
    for prepared optical flow, the flow settings it was prepared with (`recorded_flow`)."""
    cfg = resolve_num_classes(cfg, classes)
    flow = recorded_flow(cfg.data)
    return cfg if flow == cfg.data.flow else replace(cfg, data=replace(cfg.data, flow=flow))


def resolve_num_classes(cfg: RunConfig, classes: list[str]) -> RunConfig:
    """`model.num_classes = 0` means "from the class list"; a mismatch is a config error."""
    if cfg.model.num_classes == 0:
        return replace(cfg, model=replace(cfg.model, num_classes=len(classes)))
    if cfg.model.num_classes != len(classes):
        raise ConfigError(
            f"model.num_classes={cfg.model.num_classes} but {cfg.data.classes} lists "
            f"{len(classes)} classes (set model.num_classes=0 to take it from the list)"
        )
    return cfg
