"""A run's sizes, fixed at start, and the LR as a pure function of the optimizer step."""

from __future__ import annotations

from dataclasses import dataclass

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


def make_plan(cfg: RunConfig, *, world_size: int, train_size: int) -> Plan:
    micro = cfg.data.batch_size
    try:
        accumulate = effective_accumulate(cfg.optim, world_size=world_size)
    except ValueError as err:
        raise ConfigError(f"optim.{err}") from err
    global_batch = micro * world_size * accumulate
    steps_per_epoch = (train_size // world_size) // (micro * accumulate)
    if steps_per_epoch < 1:
        raise ConfigError(
            f"{train_size} training videos cannot fill one step of global batch {global_batch} "
            "(lower data.batch_size, optim.accumulate or optim.simulate_world_size)"
        )
    total = steps_per_epoch * cfg.train.epochs
    warmup = round(cfg.lr.warmup_epochs * steps_per_epoch)
    base_lr = scaled_lr(cfg.optim.lr_per_8_clips, global_batch)
    return Plan(global_batch, accumulate, steps_per_epoch, total, warmup, base_lr)


def step_lr(plan: Plan, cfg: RunConfig, step: int) -> float:
    return lr_at(
        step,
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
