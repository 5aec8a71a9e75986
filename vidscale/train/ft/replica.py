"""One process's replica in a fault-tolerant run (`ft.training`): its model, optimizer, data and
data position, the LR rule, and the forward and backward of its share of a step.

The LR rule (why: docs/fault_tolerance.md): each group keeps its batch, so a step's global
batch is the live processes x `data.batch_size`, and the LR follows it by the linear scaling
rule (TSM paper §4; Goyal et al.): `optim.lr_per_8_clips` x the step's clips / 8, times the
cosine factor of the run's progress in clips. Warmup is not applied.
"""

from __future__ import annotations

import math
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
from vidscale.models.registry import build_model
from vidscale.optim.factory import build_optimizer
from vidscale.run.data import load_data
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
    total = cfg.train.epochs * position.size
    progress = (position.epoch * position.size + position.consumed + ahead) / total
    return cfg.optim.lr_per_8_clips * step_samples / 8 * 0.5 * (1 + math.cos(math.pi * progress))


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
