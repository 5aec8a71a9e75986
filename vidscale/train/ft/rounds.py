"""Local steps and K-step averaging across fault-tolerant replica groups (`train-ft
--average-every K`): AAVG through TorchFT's quorum, or TorchFT's own LocalSGD to compare.

A round starts at a quorum (where a rejoining group heals) and takes up to K local steps (fewer
at an epoch's end: a round never crosses one). Local step j takes the j-th global batch after
the data position, each process its share, and steps its own optimizer on its share's mean
loss, at the LR of that global batch (`replica.scaled_lr`). The round ends with the averaging:

- `aavg` (`distributed.ft.averaging.average_over_quorum`): parameters, BN statistics and,
  every `--moments-every` steps and at every epoch's end, the optimizer's moments; if the
  quorum does not commit (a group failed during the round), every replica goes back to the
  round's start and the round is taken again by the new quorum, so no sample is lost or
  counted twice.
- `localsgd`: parameters only, by TorchFT's own code (`torchft.local_sgd.LocalSGD`'s averaging
  and commit, `_perform_sync`, under the round's quorum). TorchFT alone keeps the local steps
  when its sync fails; here the round is rolled back and taken again in both modes, so that
  the data stays exact.

The position moves past the round's samples only when the round commits. Every local step is
logged as `training` logs a step, with `"round"` (the committed manager step) and this
process's own loss.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

from vidscale.distributed.ft.averaging import average_over_quorum
from vidscale.distributed.ft.settings import FTSettings
from vidscale.train.ft.replica import Replica, forward_backward_share, scaled_lr, share_of


def round_steps(replica: Replica, global_batch: int, k: int) -> int:
    """Local steps of the next round: K, or what is left of the epoch."""
    left = replica.position.size - replica.position.consumed
    return min(k, math.ceil(left / global_batch))


def take_round(replica: Replica, manager: Any, settings: FTSettings) -> list[dict[str, Any]]:
    """One round (see the module); its local steps' records, or [] when it did not commit."""
    participants = manager.num_participants()
    me = (manager.participating_rank() or 0) * replica.group_size + replica.rank
    processes = participants * replica.group_size
    global_batch = replica.per_process * processes
    steps = round_steps(replica, global_batch, settings.average_every)
    backup = copy.deepcopy(replica.state_dict())
    order, round_start = replica.position.order(), manager.current_step()
    records = []
    for j in range(steps):
        start = replica.position.consumed + j * global_batch
        stop = min(start + global_batch, replica.position.size)
        share = share_of(order, start, stop, me, processes)
        replica.optimizer.zero_grad(set_to_none=True)
        loss_sum, hits = forward_backward_share(replica, share, max(len(share), 1))
        ahead = j * global_batch
        lr = scaled_lr(replica.cfg, replica.position, stop - start, ahead=ahead)
        for group in replica.optimizer.param_groups:
            group["lr"] = lr
        replica.optimizer.step()
        records.append(
            {
                "epoch": replica.position.epoch,
                "start": start,
                "stop": stop,
                "share": share,
                "participants": participants,
                "group_size": replica.group_size,
                "lr": lr,
                "loss": loss_sum / max(len(share), 1),
                "top1": 100.0 * hits / max(len(share), 1),
                "time": time.time(),
            }
        )
    ends_epoch = replica.position.consumed + steps * global_batch >= replica.position.size
    committed = commit_round(replica, manager, settings, steps, round_start, ends_epoch)
    if not committed:
        replica.load_state_dict(backup)
        return []
    for record in records:
        record.update(round=manager.current_step(), healed=replica.healed)
        replica.position.advance(global_batch)
    replica.healed = False
    return records


def commit_round(
    replica: Replica,
    manager: Any,
    settings: FTSettings,
    steps: int,
    round_start: int,
    ends_epoch: bool,
) -> bool:
    """The round's averaging; whether the quorum committed it. AAVG averages the moments every
    `moments_period` steps' worth of rounds and at every epoch's end, so that the replicas
    agree wholly where a run ends (as `distributed.aavg` averages at epoch ends)."""
    if settings.averager == "localsgd":
        from torchft.local_sgd import LocalSGD

        # TorchFT's own averaging (all-reduce of the parameters, should_commit, copy back),
        # under this round's quorum: LocalSGD.sync would start a second quorum per round,
        # which a group healing at the first one does not take part in.
        LocalSGD(manager, replica.model, replica.optimizer, sync_every=steps)._perform_sync()
        return bool(manager.current_step() > round_start)
    rounds_per_moments = settings.moments_period // settings.average_every
    return average_over_quorum(
        replica.model,
        replica.optimizer,
        manager,
        group_size=replica.group_size,
        moments=ends_epoch or (round_start + 1) % rounds_per_moments == 0,
    )
