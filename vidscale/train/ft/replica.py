"""One process's replica in a fault-tolerant run (`ft.training`): its model, optimizer, data and
data position, the LR rule, and the forward and backward of its share of a step.

The LR rule (why: docs/fault_tolerance.md): each group keeps its batch, so a step's global
batch is the live processes x `data.batch_size`, and the LR follows it by the linear scaling
rule (TSM paper §4; Goyal et al.): `optim.lr_per_8_clips` x the step's clips / 8 is the peak, and
the run's own schedule (`lr.*`: warmup, then cosine, step, poly or constant; `schedules.lr.lr_at`)
runs on a clock in clips, so warmup and decay follow the samples trained, whatever the number
of groups was along the way. Step milestones in optimizer steps have no meaning when the
step's size changes with the live groups: they are refused (give them in epochs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vidscale.config import RunConfig
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.inputs import ModelInput
from vidscale.distributed.ft.position import DataPosition
from vidscale.distributed.ft.settings import FTSettings
from vidscale.errors import InputError
from vidscale.models.registry import build_model
from vidscale.optim.factory import build_optimizer
from vidscale.run.data import load_data
from vidscale.schedules.lr import lr_at
from vidscale.schedules.lr import scaled_lr as linear_scaled_lr
from vidscale.step.run import StepContext, forward_backward


@dataclass
class Replica:
    """This process's part of the run: what a rejoining group receives, and where it logs."""

    cfg: RunConfig
    model: nn.Module
    optimizer: torch.optim.Optimizer
    position: DataPosition
    dataset: VideoClipDataset
    model_input: ModelInput
    group: int
    rank: int
    group_size: int
    log: Path
    healed: bool = False  # since the last committed step: took a peer's state

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "position": self.position.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.position.load_state_dict(state["position"])

    @property
    def per_process(self) -> int:
        return self.cfg.data.batch_size

    def done(self) -> bool:
        return self.position.epoch >= self.cfg.train.epochs


def build_replica(cfg: RunConfig, settings: FTSettings, out: Path) -> Replica:
    """The model, optimizer, data and position of this process, seeded alike on every group
    (a group that starts late receives the live state anyway)."""
    if cfg.lr.schedule == "step" and cfg.lr.milestone_unit == "step":
        raise InputError(
            "lr.milestone_unit: train-ft steps change size with the live groups; "
            "give the milestones in epochs"
        )
    cfg, splits = load_data(cfg)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model)
    optimizer = build_optimizer(model, cfg.optim, lr=cfg.optim.lr_per_8_clips)
    dataset = VideoClipDataset(splits.train, cfg.data.train_clip, train=True, seed=cfg.train.seed)
    rank, size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    (out / "ft").mkdir(parents=True, exist_ok=True)
    return Replica(
        cfg=cfg,
        model=model,
        optimizer=optimizer,
        position=DataPosition(len(dataset), cfg.train.seed),
        dataset=dataset,
        model_input=ModelInput.of(cfg.data.train_clip, cfg.data),
        group=settings.group,
        rank=rank,
        group_size=size,
        log=out / "ft" / f"group{settings.group}.rank{rank}.jsonl",
    )


def scaled_lr(
    cfg: RunConfig, position: DataPosition, step_samples: int, *, ahead: int = 0
) -> float:
    """The LR of a step of `step_samples` clips taken at `position`, `ahead` clips further
    (a round's later local steps), by the module's rule."""
    return lr_at(
        position.epoch * position.size + position.consumed + ahead,
        base_lr=linear_scaled_lr(cfg.optim.lr_per_8_clips, step_samples),
        total_steps=cfg.train.epochs * position.size,
        warmup_steps=round(cfg.lr.warmup_epochs * position.size),
        cfg=cfg.lr,
        steps_per_epoch=position.size,
    )


def share_of(order: list[int], start: int, stop: int, me: int, processes: int) -> list[int]:
    """Process `me`'s part of `order[start:stop]`, split in near-equal parts over `processes`."""
    n = stop - start
    return order[start + n * me // processes : start + n * (me + 1) // processes]


def forward_backward_share(replica: Replica, share: list[int], step_samples: int) -> list[float]:
    """Forward and backward of this process's share of a step of `step_samples` clips (the
    run's objective, `step.run.forward_backward`: gradients of the loss sum / `step_samples`);
    [loss sum, top-1 hits]. An empty share (the epoch's last step may have fewer clips than
    processes) adds nothing."""
    replica.model.train()
    if not share:
        return [0.0, 0.0]
    replica.dataset.set_epoch(replica.position.epoch)
    batch = collate([replica.dataset[i] for i in share])
    ctx = StepContext(
        model=replica.model,
        optimizer=replica.optimizer,
        prepare=replica.model_input,
        device=torch.device("cpu"),
    )
    part = forward_backward(ctx, batch, clips=step_samples)
    return [part.loss * step_samples, float(part.hits)]
