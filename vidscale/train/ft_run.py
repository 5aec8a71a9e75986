"""Training in fault-tolerant replica groups on TorchFT (`vidscale train-ft`; docs/fault_tolerance.md).

Each replica group is one `torchrun` job (one or more processes) and runs this loop; the
groups find each other through TorchFT's lighthouse, which forms a quorum of the live groups
before every step. A step:

1. `Manager.start_quorum` (synchronous): the live groups agree on the quorum; a group that is
   behind (it was restarted, or missed a commit) receives a live peer's state first, over the
   groups' process group in JSON (`distributed.ft.transport`): model, optimizer, BN buffers,
   the data position (`distributed.ft.position`), which also fixes the LR schedule's position.
2. Each process takes its share of the step's global batch and sums its loss.
3. One flat buffer (gradients, BN buffers, loss) is summed inside the group (`all_reduce` over
   the group's own gloo/NCCL group: the sum DDP computes) and then across the quorum's groups
   (`Manager.allreduce`).
4. `Manager.should_commit`: only if every collective succeeded does every process apply the
   step: gradient = the sum / the step's samples (the exact mean over the global batch), BN
   statistics = the mean over every process, LR by the rule below, position advanced. A step
   that does not commit leaves the model and the position as they were and is taken again.

Global batch and LR while a group is away: each group keeps its batch (`data.batch_size` clips
per process), so the global batch is participants x group size x batch, and the LR follows it
by the linear scaling rule (TSM paper §4; Goyal et al.): `optim.lr_per_8_clips` x the step's
samples / 8, times the cosine factor of the run's progress in samples. Keeping the global batch
instead would give each surviving process more clips per step (memory it may not have) and
make a step's cost depend on who failed; scaling the LR keeps the update per sample the same.
Warmup is not applied here.

Every committed step is appended to `OUT/ft/group{G}.rank{R}.jsonl` (step, epoch, the step's
range of the epoch's permutation, this process's share, participants, LR, loss, time), and
each process writes its final model, optimizer and position to `OUT/ft/final-group{G}.rank{R}.pt`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from vidscale.config import RunConfig
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.inputs import ModelInput
from vidscale.distributed.ft.group import init_group, pack, start_manager, sum_over_quorum, unpack
from vidscale.distributed.ft.position import DataPosition
from vidscale.distributed.ft.settings import FTSettings, check_lighthouse_reachable
from vidscale.models.registry import build_model
from vidscale.optim.factory import build_optimizer
from vidscale.run.data import load_data
from vidscale.step.run import StepContext, forward_backward

T = TypeVar("T")


class LighthouseLost(RuntimeError):
    """The lighthouse stopped answering: no quorum can form, so no group can step."""


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


def scaled_lr(cfg: RunConfig, position: DataPosition, step_samples: int) -> float:
    """The LR of a step of `step_samples` clips taken at `position` (the module's rule)."""
    total = cfg.train.epochs * position.size
    progress = (position.epoch * position.size + position.consumed) / total
    return cfg.optim.lr_per_8_clips * step_samples / 8 * 0.5 * (1 + math.cos(math.pi * progress))


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


def take_step(replica: Replica, manager: Any) -> dict[str, Any] | None:
    """One step as the module docstring says; its log record, or None when it did not
    commit (the model, buffers and position are then as before)."""
    participants = manager.num_participants()
    participant = manager.participating_rank() or 0
    processes = participants * replica.group_size
    step_samples = replica.per_process * processes
    start, stop = replica.position.step_range(step_samples)
    order = replica.position.order()
    me = participant * replica.group_size + replica.rank
    share = order[
        start + (stop - start) * me // processes : start + (stop - start) * (me + 1) // processes
    ]
    before = {k: v.clone() for k, v in replica.model.named_buffers()}
    replica.optimizer.zero_grad(set_to_none=True)
    counters = forward_backward_share(replica, share, stop - start)
    flat = pack(replica.model, counters)
    sum_over_quorum(flat, manager, group_size=replica.group_size)
    if not manager.should_commit():
        for name, buffer in replica.model.named_buffers():
            buffer.copy_(before[name])
        return None
    loss_sum, hits = unpack(replica.model, flat, processes=processes)
    lr = scaled_lr(replica.cfg, replica.position, stop - start)
    for group in replica.optimizer.param_groups:
        group["lr"] = lr
    replica.optimizer.step()
    record = {
        "step": manager.current_step(),
        "epoch": replica.position.epoch,
        "start": start,
        "stop": stop,
        "share": share,
        "participants": participants,
        "group_size": replica.group_size,
        "lr": lr,
        "loss": loss_sum / (stop - start),
        "top1": 100.0 * hits / (stop - start),
        "time": time.time(),
        "healed": replica.healed,
    }
    replica.healed = False
    replica.position.advance(step_samples)
    return record


def train_ft(cfg: RunConfig, settings: FTSettings, out: Path) -> dict[str, Any]:
    """Train this process's part of the run to `train.epochs`; the last step's record.

    A group stopped by the lighthouse's death (`LighthouseLost`) first writes its last
    committed state to `OUT/ft/stopped-group{G}.rank{R}.pt`; the same command, once a
    lighthouse answers again, continues from it (a group left a step behind heals)."""
    settings.check()
    check_lighthouse_reachable(settings.lighthouse)
    init_group(world_size=int(os.environ.get("WORLD_SIZE", "1")), timeout_s=settings.timeout_s)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    replica = build_replica(cfg, settings, out)
    manager = with_lighthouse(lambda: manager_for(replica, settings), settings, step=0)
    stopped = out / "ft" / f"stopped-group{replica.group}.rank{replica.rank}.pt"
    if stopped.exists():
        state = torch.load(stopped, weights_only=True)
        replica.load_state_dict(state["replica"])
        manager.load_state_dict(state["manager"])
    try:
        last = steps(replica, manager, settings)
    except LighthouseLost:
        torch.save({"replica": replica.state_dict(), "manager": manager.state_dict()}, stopped)
        raise
    finally:
        manager.shutdown(wait=False)
    stopped.unlink(missing_ok=True)
    final = out / "ft" / f"final-group{replica.group}.rank{replica.rank}.pt"
    torch.save(replica.state_dict(), final)
    return last


def manager_for(replica: Replica, settings: FTSettings) -> Any:
    """The group's TorchFT manager, which hands and takes this replica's state."""

    def load(state: dict[str, Any]) -> None:
        replica.load_state_dict(state)
        replica.healed = True

    return start_manager(
        settings,
        rank=replica.rank,
        group_size=replica.group_size,
        state_dict=replica.state_dict,
        load_state_dict=load,
    )


def steps(replica: Replica, manager: Any, settings: FTSettings) -> dict[str, Any]:
    """Steps until the run's epochs are done, each committed one logged; the last record."""
    last: dict[str, Any] = {}
    with replica.log.open("a") as log:
        while True:
            with_lighthouse(manager.start_quorum, settings, step=manager.current_step())
            if replica.done():
                return last
            record = take_step(replica, manager)
            if record is not None:
                log.write(json.dumps(record) + "\n")
                log.flush()
                last = record


def with_lighthouse(call: Callable[[], T], settings: FTSettings, *, step: int) -> T:
    """`call()` (a quorum, or the manager's start, which both reach the lighthouse);
    LighthouseLost when it fails and the lighthouse does not answer, the one failure no
    group can step through."""
    try:
        return call()
    except Exception as err:
        try:
            check_lighthouse_reachable(settings.lighthouse, timeout_s=1.0)
        except ValueError:
            raise LighthouseLost(
                f"the lighthouse at {settings.lighthouse} stopped answering at step {step}; "
                "no quorum can form (start it again, then the same command continues)"
            ) from err
        raise
