"""What the trainer builds from its parts once they exist, and ends when it stops: the
checkpointer over the registry of checkpointed parts, the context every step runs in, and the
loader workers' end. Kept out of `loop.Trainer` so that the class holds the epoch loop and its
order, not the wiring of each collaborator.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils.data import DataLoader

from vidscale.config import RunConfig
from vidscale.data.inputs import ModelInput
from vidscale.data.loaders import TrainData, stop_workers
from vidscale.distributed.env import DistEnv
from vidscale.distributed.parallel import DataParallel
from vidscale.fastpath.decision import FastPathDecision
from vidscale.run.record import RunRecord
from vidscale.run.timeline import RunSizes
from vidscale.step.objective import objective_for
from vidscale.step.run import StepContext
from vidscale.train.checkpoints.checkpointer import Checkpointer, RunState
from vidscale.train.checkpoints.resume import Progress
from vidscale.train.phases.adaptive_batch import AdaptiveBatch
from vidscale.train.phases.phase_switch import PhaseSwitch
from vidscale.train.records.run_log import RunLog
from vidscale.train.survival.resilience import DivergenceGuard, StopSignals
from vidscale.train.survival.watchdog import Watchdog


class TrainerParts(Protocol):
    """What the wiring reads of a trainer (`loop.Trainer`) once its parts are built."""

    cfg: RunConfig
    run_dir: Path
    env: DistEnv
    start_sizes: RunSizes
    fast_choice: FastPathDecision
    model: nn.Module
    ddp_model: nn.Module
    optimizer: torch.optim.Optimizer
    strategy: DataParallel
    progress: Progress
    run_log: RunLog
    guard: DivergenceGuard
    adaptive: AdaptiveBatch
    phase_switch: PhaseSwitch
    signals: StopSignals
    watchdog: Watchdog
    prepare: ModelInput
    autocast: Callable[[], AbstractContextManager[Any]]
    train_data: TrainData
    val_loader: DataLoader


def build_checkpointer(trainer: TrainerParts) -> Checkpointer:
    """The run's checkpointer: the run's record, and every checkpointed part registered once
    (`checkpointer.RunState`)."""
    record = RunRecord.of_run(trainer.cfg, trainer.start_sizes, fast_path=trainer.fast_choice)
    parts = RunState(
        model=trainer.model,
        optimizer=trainer.optimizer,
        strategy=trainer.strategy,
        progress=trainer.progress,
        run_log=trainer.run_log,
        guard=trainer.guard,
        adaptive=trainer.adaptive,
        phase_switch=trainer.phase_switch,
    )
    return Checkpointer(
        trainer.run_dir,
        trainer.env,
        parts,
        record=record,
        keep=trainer.cfg.train.keep_checkpoints,
        signals=trainer.signals,
        watchdog=trainer.watchdog,
    )


def step_context(trainer: TrainerParts) -> StepContext:
    """The context every step of `trainer`'s run uses (`step.run`), built once."""
    signals = trainer.signals  # not `trainer`: a trainer in a reference cycle would outlive
    # its last reference, and its loaders' persistent workers with it
    return StepContext(
        model=trainer.ddp_model,
        optimizer=trainer.optimizer,
        prepare=trainer.prepare,
        device=trainer.env.device,
        autocast=trainer.autocast,
        micro_batch=trainer.strategy.micro_batch,
        world_size=trainer.env.world_size,
        clip_grad_norm=trainer.cfg.optim.clip_grad_norm,
        stop_requested=lambda: signals.requested,
        objective=objective_for(multi_label=trainer.cfg.data.multi_label),
    )


def stop_loader_workers(trainer: TrainerParts) -> None:
    """End the trainer's loader worker processes now. They persist for the run and would
    otherwise live until the loaders are collected: in a process that trains again (a sweep),
    at an unknown moment, possibly while the next run forks its own workers."""
    trainer.train_data.close()
    stop_workers(trainer.val_loader)
    del trainer.train_data, trainer.val_loader
