"""Small `build_*` functions that turn a `RunConfig` into the pieces the loop uses."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

from vidscale.config import ConfigError, RunConfig
from vidscale.data.annotations import VideoRecord, read_annotations, read_class_names
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.samplers import ExactEvalSampler, TrainSampler
from vidscale.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize
from vidscale.distributed.env import DistEnv
from vidscale.models.registry import build_model as build_registered_model
from vidscale.train.fast_path import FastPath, apply_to_model, resolve_fast_path


@dataclass(frozen=True)
class DataSplits:
    classes: list[str]
    train: list[VideoRecord]
    val: list[VideoRecord]


def resolve_path(root: str, name: str) -> Path:
    p = Path(name)
    return p if p.is_absolute() else Path(root) / p


def load_splits(cfg: RunConfig) -> DataSplits:
    """Read the class list and both annotation files; errors name the file and line."""
    if not cfg.data.root:
        raise ConfigError("data.root is not set (pass --data DIR or --set data.root=DIR)")
    root = Path(cfg.data.root)
    if not root.is_dir():
        raise ConfigError(f"data.root: {root} is not a directory")
    classes = read_class_names(resolve_path(cfg.data.root, cfg.data.classes))
    train = read_annotations(
        resolve_path(cfg.data.root, cfg.data.train_list),
        classes=classes,
        skip_missing=cfg.data.skip_missing,
    )
    val = read_annotations(
        resolve_path(cfg.data.root, cfg.data.val_list),
        classes=classes,
        skip_missing=cfg.data.skip_missing,
    )
    for name, records in ((cfg.data.train_list, train), (cfg.data.val_list, val)):
        if not records:
            raise ConfigError(f"{resolve_path(cfg.data.root, name)} lists no readable videos")
    return DataSplits(classes=classes, train=list(train), val=list(val))


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


def set_threads(cfg: RunConfig, env: DistEnv) -> None:
    """Share the cores among the processes of one node (torch defaults to all of them each)."""
    if env.device.type != "cpu":
        return
    threads = cfg.train.threads or max(1, (os.cpu_count() or 1) // env.local_world_size)
    torch.set_num_threads(threads)


def fast_path(cfg: RunConfig, env: DistEnv) -> FastPath:
    t = cfg.train
    return resolve_fast_path(
        env.device, enabled=t.fast_path, amp=t.amp, channels_last=t.channels_last, compile=t.compile
    )


def build_model(cfg: RunConfig, env: DistEnv, fast: FastPath) -> nn.Module:
    model = build_registered_model(cfg.model).to(env.device)
    return apply_to_model(model, fast)


def input_preparer(cfg: RunConfig, env: DistEnv) -> Callable[[torch.Tensor], torch.Tensor]:
    """uint8 (N, C, T, H, W) on the device -> normalised float model input."""
    channels = cfg.model.in_channels
    mean = IMAGENET_MEAN if channels == 3 else (127.5,) * channels
    std = IMAGENET_STD if channels == 3 else (127.5,) * channels

    def prepare(clips: torch.Tensor) -> torch.Tensor:
        return normalize(clips, mean=mean, std=std)

    return prepare


def build_train_loader(
    cfg: RunConfig, env: DistEnv, records: list[VideoRecord]
) -> tuple[DataLoader, TrainSampler, VideoClipDataset]:
    dataset = VideoClipDataset(records, cfg.data.train_clip, train=True, seed=cfg.train.seed)
    sampler = TrainSampler(
        len(dataset), rank=env.rank, world_size=env.world_size, seed=cfg.train.seed
    )
    loader = DataLoader(
        dataset,
        batch_size=cfg.data.batch_size,
        sampler=sampler,
        num_workers=cfg.data.workers,
        collate_fn=collate,
        pin_memory=env.device.type == "cuda",
        drop_last=True,
        persistent_workers=False,
        prefetch_factor=4 if cfg.data.workers > 0 else None,
    )
    return loader, sampler, dataset


def build_eval_loader(cfg: RunConfig, env: DistEnv, records: list[VideoRecord]) -> DataLoader:
    dataset = VideoClipDataset(records, cfg.data.eval_clip, train=False, seed=cfg.train.seed)
    sampler = ExactEvalSampler(len(dataset), rank=env.rank, world_size=env.world_size)
    return DataLoader(
        dataset,
        batch_size=cfg.data.eval_batch_size or cfg.data.batch_size,
        sampler=sampler,
        num_workers=cfg.data.workers,
        collate_fn=collate,
        pin_memory=env.device.type == "cuda",
        drop_last=False,
    )
