"""A model under DistributedDataParallel in a group of one rank: DDP's bucketing and a gradient
hook's own computation run as under several processes, while the all-reduces move nothing.
What a hook computes per step is measured this way on one process (`bench network`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


@contextmanager
def one_rank_ddp(model: nn.Module, *, bucket_cap_mb: float) -> Iterator[DistributedDataParallel]:
    """`model` wrapped as `ddp.wrap_ddp` wraps it, in a one-rank gloo group with an in-memory
    store (nothing leaves the process); the group is left on exit. Not inside another group."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield DistributedDataParallel(
            model, bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=True
        )
    finally:
        dist.destroy_process_group()
