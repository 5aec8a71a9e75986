"""`bench scaling --data DIR`: the measured steps read real clips, as `vidscale train` reads them.

Without `--data`, `bench scaling` feeds every rank random clips held in memory, so a step costs
what the model and the network cost. With it, every rank reads its share of DIR's training
split through the trainer's own loader (`train.builders.build_train_data`: the same datasets,
sampler and worker processes; `--source videos` decodes the files, `shards` and `stream` read a
`vidscale prepare`d directory), so the step's data wait is what decoding and augmentation leave
exposed on this machine, beside the same processes' compute (the TSM paper's data-loading
efficiency, §3b, measured at scale). Training clips are sampled as the TSM recipes sample them
(8 uniform segments, multi-scale crops of `--size` from a short side of 256/224 x `--size`,
flips), `--frames` per clip; the class count is the data's, and a multi-label layout
(`charades`, `multilabel`) trains on label sets with binary cross-entropy, as `train` would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vidscale.config import ConfigError, DataConfig, RunConfig
from vidscale.run.data import load_data, load_splits

if TYPE_CHECKING:
    from vidscale.bench.scaling.config import ScalingConfig
    from vidscale.distributed.env import DistEnv


def run_config(cfg: ScalingConfig, model: str) -> RunConfig:
    """The training config whose data section the measured processes read with: `cfg.data`,
    `cfg.source`, `cfg.workers` loader processes per rank, `cfg.frames` x `cfg.size`² clips,
    label sets where the layout has them."""
    from vidscale.data.clip import ClipSpec
    from vidscale.models.registry import ModelConfig

    clip = ClipSpec(
        frames=cfg.frames, crop_size=cfg.size, short_side=max(cfg.size, round(cfg.size * 256 / 224))
    )
    base = RunConfig()
    return replace(
        base,
        model=ModelConfig(name=model, num_classes=0, frames=cfg.frames),
        data=DataConfig(
            root=cfg.data,
            source=cfg.source,  # type: ignore[arg-type]
            layout=cfg.layout,  # type: ignore[arg-type]
            multi_label=cfg.multi_label,
            batch_size=cfg.batch,
            workers=cfg.workers,
            train_clip=clip,
        ),
        train=replace(base.train, seed=cfg.seed),
    )


def classes_of(cfg: ScalingConfig) -> int:
    """How many classes `cfg.data` has (read once, in the launcher), after checking that its
    training split fills at least one batch per process. ConfigError naming `--data` or the
    file otherwise."""

    if not Path(cfg.data).is_dir():
        raise ConfigError(f"--data: {cfg.data} is not a directory")
    run = run_config(cfg, cfg.models[0])
    try:
        splits = load_splits(run)
    except ConfigError as err:
        raise ConfigError(f"--data: {err}") from err
    need = cfg.batch * max(cfg.procs or (1,))
    if len(splits.train) < need:
        raise ConfigError(
            f"--data: {cfg.data} has {len(splits.train)} training videos, fewer than one batch "
            f"per process ({cfg.batch} x {max(cfg.procs or (1,))})"
        )
    return len(splits.classes)


def real_batches(cfg: ScalingConfig, env: DistEnv, model: str) -> Iterator[dict[str, Any]]:
    """This rank's training batches of `cfg.batch` clips, epoch after epoch, from the trainer's
    loader (its workers start once and persist, as in training)."""
    from vidscale.train import builders

    run = run_config(cfg, model)
    run, splits = load_data(run)
    data = builders.build_train_data(run, env, splits.train, micro_batch=cfg.batch)
    per_epoch = len(splits.train) // env.world_size // cfg.batch
    epoch = 0
    while True:
        yield from data.base_shape_batches(epoch, batches=per_epoch, size=cfg.batch)
        epoch += 1
