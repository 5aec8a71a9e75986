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
samples / 8 is the peak, on the run's own schedule (warmup, then its decay) counted in samples
(`replica.scaled_lr`). Keeping the global batch instead would give each surviving process more
clips per step (memory it may not have) and make a step's cost depend on who failed; scaling
the LR keeps the update per sample the same.

Every committed step is appended to `OUT/ft/group{G}.rank{R}.jsonl` (step, epoch, the step's
range of the epoch's permutation, this process's share, participants, LR, loss, time), and
each process writes its final model, optimizer and position to `OUT/ft/final-group{G}.rank{R}.pt`.
At each epoch's end one group evaluates and writes the run's standard checkpoint, metrics line
and, at the end, summary (`epochs`); a group started with no live state to take (the whole job
was stopped) continues from the newest of those checkpoints (`epochs.restore_latest`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from vidscale.config import RunConfig
from vidscale.distributed.ft.group import init_group, pack, start_manager, sum_over_quorum, unpack
from vidscale.distributed.ft.settings import FTSettings, check_lighthouse_reachable
from vidscale.train.ft.epochs import EpochEnds, check_epoch_settings, restore_latest
from vidscale.train.ft.replica import (
    Replica,
    build_replica,
    forward_backward_share,
    scaled_lr,
    share_of,
)
from vidscale.train.ft.rounds import take_round

T = TypeVar("T")


class LighthouseLost(RuntimeError):
    """The lighthouse stopped answering: no quorum can form, so no group can step."""


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
    share = share_of(order, start, stop, me, processes)
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
    check_epoch_settings(cfg)
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
    else:  # every group may have stopped: the run's newest checkpoint, if it has one
        restore_latest(replica, manager, out)
    ends = EpochEnds.of(replica, groups=settings.groups, out=out)
    try:
        last = steps(replica, manager, settings, ends)
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


def steps(replica: Replica, manager: Any, settings: FTSettings, ends: EpochEnds) -> dict[str, Any]:
    """Steps until the run's epochs are done, each committed one logged, and at each epoch's
    end what `epochs.EpochEnds` does; the last record."""
    last: dict[str, Any] = {}
    with replica.log.open("a") as log:
        while True:
            with_lighthouse(manager.start_quorum, settings, step=manager.current_step())
            if replica.done():
                return last
            epoch = replica.position.epoch
            if settings.average_every:
                done = take_round(replica, manager, settings)
            else:
                record = take_step(replica, manager)
                done = [record] if record is not None else []
            for record in done:
                log.write(json.dumps(record) + "\n")
                last = record
            log.flush()
            ends.note(done)
            if replica.position.epoch > epoch:
                ends.after_epoch(manager, lr=last["lr"])


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
