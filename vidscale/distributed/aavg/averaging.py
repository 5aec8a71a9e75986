"""Model averaging for K-step local SGD (Cong et al., Alg. 1 line 12 and Alg. 2).

`average_replicas` makes every rank hold the mean of all ranks' replicas in one flat all-reduce
per (dtype, device): the parameters; with `merge_optimizer_state` the optimizer's per-parameter
state (Adam/AdamW m and v as Alg. 2 lines 2 and 5, SGD momentum, LARS/LAMB buffers); and the
BatchNorm running statistics. With `merge_bn` these are merged as Alg. 2 lines 1, 3 and 6: the
mean of the means, and the variance of the pooled data, mean(var_j + mean_j²) − mean²; without
it they are averaged plainly. Either way the ranks end bitwise identical: each reduces the same
sums in the same order and divides by the same count.

torch's own averagers (`torch.distributed.algorithms.model_averaging`) average parameters only
and skip parameters without `.grad`, which would leave optimizer state and BN statistics apart.

Step counters (Adam's `step`, BN's `num_batches_tracked`) are not averaged: every rank takes the
same optimizer steps and forward passes, so they already agree.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


class FlatBuffers:
    """One flat buffer per (dtype, device), kept from one averaging to the next.

    The averaging packs every tensor it averages into one flat buffer for one all-reduce. A
    fresh buffer each time costs the page faults of hundreds of megabytes on every averaging
    (an I3D-R50 with its momentum is 376 MB), which the kernel zero-fills again each time; a
    buffer kept by the caller (`AAVGStrategy`, every K steps) is written over in memory already
    mapped. It grows to the largest size asked for and never shrinks.
    """

    def __init__(self) -> None:
        self._kept: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}

    def get(self, dtype: torch.dtype, device: torch.device, numel: int) -> torch.Tensor:
        """A contiguous 1-D tensor of `numel` elements; its contents are undefined."""
        kept = self._kept.get((dtype, device))
        if kept is None or kept.numel() < numel:
            kept = torch.empty(numel, dtype=dtype, device=device)
            self._kept[(dtype, device)] = kept
        return kept[:numel]


@dataclass(frozen=True)
class AveragingStats:
    """What one averaging sent: bytes put into all-reduces by this rank, and their number."""

    bytes_sent: int
    collectives: int


def optimizer_moments(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The per-parameter state tensors shaped like their parameter (m, v, momentum, ...)."""
    found = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            for value in optimizer.state.get(p, {}).values():
                if torch.is_tensor(value) and value.is_floating_point() and value.shape == p.shape:
                    found.append(value)
    return found


def running_statistics(model: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(running mean, running variance) of every BatchNorm that tracks them."""
    found = []
    for m in model.modules():
        if isinstance(m, _BatchNorm) and m.running_mean is not None and m.running_var is not None:
            found.append((m.running_mean, m.running_var))
    return found


def average_replicas(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    merge_optimizer_state: bool = True,
    merge_bn: bool = True,
    buffers: FlatBuffers | None = None,
) -> AveragingStats:
    """Replace every rank's replica by the mean over ranks (a collective; see the module).

    The identity on one process (nothing is sent). `buffers`, kept by a caller that averages
    repeatedly, saves allocating the flat all-reduce buffer each time.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return AveragingStats(0, 0)
    world = dist.get_world_size()
    tensors = [p.data for p in model.parameters()]
    if merge_optimizer_state and optimizer is not None:
        tensors += optimizer_moments(optimizer)
    statistics = running_statistics(model)
    if merge_bn:
        # Each replica's second moment E[x²] = var + mean² (Alg. 2 line 1) is what averages.
        for mean, var in statistics:
            var.add_(mean * mean)
    tensors += [t for pair in statistics for t in pair]
    stats = _mean_over_ranks(tensors, world=world, buffers=buffers)
    if merge_bn:
        for mean, var in statistics:
            var.sub_(mean * mean)  # Alg. 2 line 6: z/P − (m/P)²
    return stats


def merge_running_statistics(model: nn.Module) -> AveragingStats:
    """Every rank's BatchNorm running statistics replaced by their pool over ranks (Alg. 2
    line 6: the mean of the means; the variance from the mean of E[x²] = var + mean²), as if
    one process had seen every rank's batches. A collective; the identity on one process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return AveragingStats(0, 0)
    statistics = running_statistics(model)
    for mean, var in statistics:
        var.add_(mean * mean)
    stats = _mean_over_ranks([t for pair in statistics for t in pair], world=dist.get_world_size())
    for mean, var in statistics:
        var.sub_(mean * mean)
    return stats


def _mean_over_ranks(
    tensors: list[torch.Tensor], *, world: int, buffers: FlatBuffers | None = None
) -> AveragingStats:
    """Average `tensors` in place, one flat all-reduce per (dtype, device), packed into
    `buffers` (a new buffer per call without them)."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = defaultdict(list)
    for t in tensors:
        groups[(t.dtype, t.device)].append(t)
    buffers = buffers if buffers is not None else FlatBuffers()
    sent = 0
    for (dtype, device), members in groups.items():
        flat = buffers.get(dtype, device, sum(t.numel() for t in members))
        torch.cat([t.reshape(-1) for t in members], out=flat)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(world)
        offset = 0
        for t in members:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()
        sent += flat.numel() * flat.element_size()
    return AveragingStats(sent, len(groups))
