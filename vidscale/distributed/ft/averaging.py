"""AAVG across replica groups, through TorchFT's quorum (Cong et al., Alg. 1 line 12, Alg. 2).

Every K local steps the replicas of the quorum's groups are replaced by their mean in one
flat float32 sum (`group.sum_over_quorum`): the parameters; the BatchNorm running statistics
merged as Alg. 2 (the mean of the means, the pooled variance mean(var + mean²) − mean²); and,
on rounds that include them, the optimizer's per-parameter moments (SGD momentum, Adam's m and
v). DES-LOC (arXiv 2505.22549) averages the moments less often than the parameters: a round
passes `moments=False` then. Nothing is written unless the quorum commits: a group that failed
during the round is dropped from this averaging (the others' sums do not include it and they
commit without it), not from the run.

TorchFT's own `LocalSGD` averages the parameters only; BN statistics and moments stay each
replica's own.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from vidscale.distributed.aavg.averaging import optimizer_moments, running_statistics
from vidscale.distributed.ft.group import sum_over_quorum


def average_over_quorum(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    manager: Any,
    *,
    group_size: int,
    moments: bool,
) -> bool:
    """Average this replica with the quorum's (see the module); whether it committed."""
    tensors = [p.data for p in model.parameters()]
    if moments:
        tensors += optimizer_moments(optimizer)
    statistics = running_statistics(model)
    means = [mean for mean, _ in statistics]
    second = [var + mean * mean for mean, var in statistics]
    parts = [*tensors, *means, *second]
    flat = torch.cat([t.reshape(-1).to(torch.float32) for t in parts])
    sum_over_quorum(flat, manager, group_size=group_size)
    if not manager.should_commit():
        return False
    flat /= manager.num_participants() * group_size
    offset = 0
    for t in parts:  # the second moments land in `second`, copies; the variances below
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
    for (mean, var), pooled in zip(statistics, second, strict=True):
        var.copy_(pooled - mean * mean)
    return True
