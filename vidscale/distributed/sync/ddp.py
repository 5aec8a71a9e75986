"""Synchronous data parallelism: DistributedDataParallel (ring all-reduce of gradients).

`DDPStrategy` is this as the `ddp` data-parallel strategy (`vidscale.distributed.parallel`).
Gradient accumulation simulates a larger cluster (TSM paper §4, Table 3 rows marked *): all but
the last micro-batch run under `no_sync()`, so gradients are all-reduced once per optimizer step
and the result equals the big batch's gradient.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from vidscale.distributed.collectives import broadcast_buffers
from vidscale.distributed.env import DistEnv
from vidscale.distributed.parallel import DataParallel, register_strategy
from vidscale.distributed.sync.comm_hooks import CommConfig, CommHook, attach_comm_hook
from vidscale.distributed.traffic import Traffic

if TYPE_CHECKING:
    from vidscale.distributed.aavg.config import AAVGConfig


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


@register_strategy("ddp")
class DDPStrategy(DataParallel):
    """Gradients all-reduced every optimizer step (DDP), through the configured comm hook.

    `consensus` gives every rank rank 0's buffers: DDP broadcasts them at each forward anyway
    (so this changes nothing for training), but BatchNorm's running statistics drift apart
    within a step, and evaluation and checkpoints must see one model.
    """

    fresh_start = "PowerSGD starts afresh from its warm-up"

    def __init__(self, env: DistEnv, comm: CommConfig) -> None:
        self.env, self.comm = env, comm
        self._wrapped: nn.Module | None = None
        self._hook: CommHook | None = None

    @classmethod
    def from_config(cls, env: DistEnv, *, comm: CommConfig, aavg: AAVGConfig) -> DDPStrategy:
        return cls(env, comm)

    def wrap(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        self._wrapped = wrap_ddp(model, self.env, bucket_cap_mb=self.comm.bucket_cap_mb)
        self._hook = attach_comm_hook(self._wrapped, self.comm)
        self.per_rank = self._hook.per_rank
        return self._wrapped

    def micro_batch(self, *, last: bool) -> AbstractContextManager[None]:
        # no_sync on all but the last micro-batch: one all-reduce per optimizer step.
        return gradient_sync(self._model(), sync=last)

    def after_step(self, *, step_in_epoch: int, epoch_end: bool) -> None:
        """Nothing: the all-reduce inside the step already left every rank the same weights."""

    @contextlib.contextmanager
    def consensus(self) -> Iterator[None]:
        broadcast_buffers(unwrap(self._model()))
        yield

    def take_traffic(self) -> Traffic:
        return self._comm_hook().take()

    def state_dict(self) -> dict[str, Any]:
        return self._comm_hook().state_dict()

    def incompatibility(self, state: dict[str, Any]) -> str | None:
        return self._comm_hook().incompatibility(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._comm_hook().load_state_dict(state)

    def _model(self) -> nn.Module:
        if self._wrapped is None:
            raise RuntimeError("DDPStrategy.wrap(model, optimizer) must be called first")
        return self._wrapped

    def _comm_hook(self) -> CommHook:
        if self._hook is None:
            raise RuntimeError("DDPStrategy.wrap(model, optimizer) must be called first")
        return self._hook
