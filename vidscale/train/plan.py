"""A run's sizes, fixed at start, and the LR as a pure function of the optimizer step."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vidscale.config import ConfigError, RunConfig
from vidscale.optim.factory import effective_accumulate
from vidscale.schedules.lr import lr_at, scaled_lr


@dataclass(frozen=True)
class Plan:
    global_batch: int
    accumulate: int  # micro-batches per optimizer step on this world size
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    base_lr: float  # the peak: lr_per_8_clips x global_batch / 8
    world_size: int = 1
    micro_batch: int = 1  # clips per process per micro-batch
    train_size: int = 0  # training videos

    def record(self) -> dict[str, Any]:
        """Plain values for a checkpoint (`weights_only` loads them)."""
        return asdict(self)


def requested_global_batch(cfg: RunConfig, *, world_size: int) -> int:
    """The global batch `cfg` asks for on `world_size` processes."""
    try:
        accumulate = effective_accumulate(cfg.optim, world_size=world_size)
    except ValueError as err:
        raise ConfigError(f"optim.{err}") from err
    return cfg.data.batch_size * world_size * accumulate


def make_plan(
    cfg: RunConfig,
    *,
    world_size: int,
    train_size: int,
    global_batch: int | None = None,
    micro_batch: int | None = None,
    base_lr: float | None = None,
) -> Plan:
    """The run's sizes on `world_size` processes.

    `global_batch` (a resumed run's) is kept whatever the process count: accumulation adapts,
    and a process count that cannot divide it is refused. Steps per epoch are
    `train_size // global_batch` on any process count (floor(floor(n/W)/(b*a)) = floor(n/(W*b*a))).
    `micro_batch` (default `data.batch_size`) and `base_lr` (default: the linear scaling rule)
    are set by an adapted batch size (`train.adaptive_batch`).
    """
    micro = micro_batch or cfg.data.batch_size
    if global_batch is None:
        global_batch = requested_global_batch(cfg, world_size=world_size)
    if global_batch % (micro * world_size):
        raise ConfigError(
            f"global batch {global_batch} cannot be kept on {world_size} process(es) with "
            f"data.batch_size={micro}: {global_batch} is not a multiple of {micro} x "
            f"{world_size} (choose a data.batch_size that divides {global_batch // world_size})"
        )
    accumulate = global_batch // (micro * world_size)
    steps_per_epoch = train_size // global_batch
    if steps_per_epoch < 1:
        raise ConfigError(
            f"{train_size} training videos cannot fill one step of global batch {global_batch} "
            "(lower data.batch_size, optim.accumulate or optim.simulate_world_size)"
        )
    total = steps_per_epoch * cfg.train.epochs
    warmup = round(cfg.lr.warmup_epochs * steps_per_epoch)
    if base_lr is None:
        base_lr = scaled_lr(cfg.optim.lr_per_8_clips, global_batch)
    return Plan(
        global_batch,
        accumulate,
        steps_per_epoch,
        total,
        warmup,
        base_lr,
        world_size=world_size,
        micro_batch=micro,
        train_size=train_size,
    )


def schedule_position(plan: Plan, *, epoch: int, step_in_epoch: int) -> int:
    """Where a run is on its LR schedule, in steps of `plan`: counted from epochs, so that a
    batch size changed between epochs (fewer, larger steps) continues the same curve over
    epochs. Equal to the optimizer step count while the plan never changed."""
    return epoch * plan.steps_per_epoch + step_in_epoch


def step_lr(plan: Plan, cfg: RunConfig, position: int) -> float:
    """The LR at schedule `position` (`schedule_position`)."""
    return lr_at(
        position,
        base_lr=plan.base_lr,
        total_steps=plan.total_steps,
        warmup_steps=plan.warmup_steps,
        cfg=cfg.lr,
        steps_per_epoch=plan.steps_per_epoch,
    )


def recipe_row(name: str, cfg: RunConfig, *, world_size: int, train_size: int) -> dict[str, object]:
    """What a recipe resolves to on `world_size` processes for a dataset of `train_size` videos."""
    plan = make_plan(cfg, world_size=world_size, train_size=train_size)
    return {
        "recipe": name,
        "model": cfg.model.name,
        "frames": cfg.data.train_clip.frames,
        "recipe_gpus": cfg.optim.simulate_world_size or world_size,
        "clips_per_gpu": cfg.data.batch_size,
        "accumulate": plan.accumulate,
        "global_batch": plan.global_batch,
        "lr": plan.base_lr,
        "warmup_epochs": cfg.lr.warmup_epochs,
        "warmup_steps": plan.warmup_steps,
        "steps_per_epoch": plan.steps_per_epoch,
        "epochs": cfg.train.epochs,
        "total_steps": plan.total_steps,
        "optimizer": cfg.optim.name,
    }
