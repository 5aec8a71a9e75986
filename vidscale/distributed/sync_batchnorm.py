"""BatchNorm statistics synchronised over groups of processes, for per-device batches that shrink.

Wu et al. 2020 ("A Multigrid Method for Efficiently Training Video Models", §3.3) keep every
BatchNorm statistic over a fixed number of clips, the "BN base size": where a multigrid shape
gives a device fewer clips than that, PySlowFast synchronises BN over a group of devices whose
batches together hold the base size (`MULTIGRID.BN_BASE_SIZE`, `BN.NUM_SYNC_DEVICES`,
`NaiveSyncBatchNorm3d`). Here that is `torch.nn.SyncBatchNorm` with one process group per group
of consecutive ranks (`torch.distributed.new_subgroups`): torchrun numbers a node's processes
consecutively, so a group stays inside a node, on its fast links, as PySlowFast's local groups.

Contracts:

- **Where it runs.** `SyncBatchNorm` normalises CUDA tensors only, so `sync_group_size` says 1
  (plain BN) on CPU processes and on one process; the caller reports that. Groups tile the
  processes: the size is the largest divisor of the world size not above the devices asked for.
  Every process calls `set_batchnorm_sync` at the same point with the same size: making the
  subgroups is a collective (each size's groups are made once per process and kept until exit,
  as `env.shutdown` keeps the default group, for the same reason).
- **Switching in place.** `set_batchnorm_sync(model, size)` replaces every `nn.BatchNorm2d/3d`
  (plain BN, not sub-batch BN: leave that first) by a `GroupSyncBatchNorm` over the groups of
  `size`, and size 1 puts back the plain layers. As `models.batchnorm.set_batchnorm_splits`: the
  learnt Parameters and the running-statistics tensors are the same objects afterwards, so an
  optimizer and a `DistributedDataParallel` wrapper built before keep working; the state_dict
  keys are plain BN's. In evaluation mode the layer is plain BN on its running statistics.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from vidscale.distributed.env import DistEnv
from vidscale.models.batchnorm import SubBatchNorm2d, SubBatchNorm3d, share_tensors

_subgroups: dict[int, dist.ProcessGroup] = {}  # group size -> this process's group, kept


class GroupSyncBatchNorm(nn.SyncBatchNorm):
    """`nn.SyncBatchNorm` that remembers the plain layer it stands for (`plain`: BatchNorm2d
    for the "frames" layout, BatchNorm3d for volumes), so that leaving the sync phase puts the
    same kind back."""

    plain: type[_BatchNorm] = nn.BatchNorm3d
    group_size: int = 1


def sync_group_size(env: DistEnv, devices: int) -> int:
    """The processes per sync group for a phase asking for `devices`: 1 where BN cannot be
    synchronised here (one process, or CPU tensors, which `SyncBatchNorm` refuses)."""
    if devices < 1:
        raise ValueError(f"sync devices must be >= 1, got {devices}")
    if not env.distributed or env.device.type != "cuda":
        return 1
    return max(d for d in range(1, min(devices, env.world_size) + 1) if env.world_size % d == 0)


def _group(size: int) -> dist.ProcessGroup:
    if size not in _subgroups:
        # Collective: every rank makes every group of `size`, in the same order.
        mine, _ = dist.new_subgroups(group_size=size)
        _subgroups[size] = mine
    return _subgroups[size]


def _sync_children(model: nn.Module) -> list[tuple[nn.Module, str, _BatchNorm]]:
    """(parent, name, layer) for every BN child this module may convert, each occurrence."""
    kinds = (nn.BatchNorm2d, nn.BatchNorm3d, GroupSyncBatchNorm)
    return [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, kinds)
    ]


def _converted(bn: _BatchNorm, size: int) -> _BatchNorm:
    if isinstance(bn, SubBatchNorm2d | SubBatchNorm3d):
        raise ValueError(
            "synchronised BN replaces plain BN layers: set sub-batch splits to 1 first"
        )
    meta = torch.device("meta")
    dtype = bn.running_mean.dtype if bn.running_mean is not None else None
    args = (bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats)
    if size == 1:
        plain = bn.plain if isinstance(bn, GroupSyncBatchNorm) else type(bn)
        return share_tensors(plain(*args, device=meta, dtype=dtype), bn)
    new = GroupSyncBatchNorm(*args, process_group=_group(size), device=meta, dtype=dtype)
    new.plain = bn.plain if isinstance(bn, GroupSyncBatchNorm) else type(bn)
    new.group_size = size
    return share_tensors(new, bn)


def set_batchnorm_sync(model: nn.Module, size: int) -> int:
    """Synchronise every BN layer of `model` over groups of `size` consecutive ranks (1: plain
    BN again); returns the number of layers replaced. A collective when `size` > 1 is new to
    this process (see the module docstring)."""
    if size < 1:
        raise ValueError(f"sync group size must be >= 1, got {size}")
    done: dict[int, _BatchNorm] = {}  # a layer reachable by two names is converted once
    for parent, name, bn in _sync_children(model):
        current = bn.group_size if isinstance(bn, GroupSyncBatchNorm) else 1
        if current == size:
            continue
        if id(bn) not in done:
            done[id(bn)] = _converted(bn, size)
        setattr(parent, name, done[id(bn)])
    return len(done)
