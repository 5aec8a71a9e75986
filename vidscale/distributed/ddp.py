"""Synchronous data parallelism: DistributedDataParallel (ring all-reduce of gradients).

Gradient accumulation simulates a larger cluster (TSM paper §4, Table 3 rows marked *): all but
the last micro-batch run under `no_sync()`, so gradients are all-reduced once per optimizer step
and the result equals the big batch's gradient.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from vidscale.distributed.env import DistEnv


def wrap_ddp(model: nn.Module, env: DistEnv, *, bucket_cap_mb: float = 25.0) -> nn.Module:
    """Wrap in DDP under a process group; return the model unchanged on one process."""
    if not env.distributed:
        return model
    device_ids = [env.device.index] if env.device.type == "cuda" else None
    return DistributedDataParallel(
        model,
        device_ids=device_ids,
        bucket_cap_mb=bucket_cap_mb,
        # DDP broadcasts rank 0's BN buffers at each forward; ranks' statistics still drift
        # apart within a step, so evaluation uses rank 0's (DESIGN §6).
        gradient_as_bucket_view=True,
    )


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


@contextlib.contextmanager
def gradient_sync(model: nn.Module, *, sync: bool) -> Iterator[None]:
    """Skip DDP's all-reduce on micro-batches that are not the last of an accumulation."""
    if sync or not isinstance(model, DistributedDataParallel):
        yield
        return
    with model.no_sync():
        yield


def is_ddp(model: nn.Module) -> bool:
    return isinstance(model, DistributedDataParallel)
