"""Data parallelism as a strategy: how the ranks share the training of one model.

The training loop calls a strategy at named points and never asks which one it has (DESIGN §9):

- `wrap(model)`: the module the step calls (DDP's wrapper, or the model itself);
- `micro_batch(last=...)`: the context of one micro-batch's forward and backward; only the last
  of an optimizer step's micro-batches may communicate (gradient accumulation, TSM paper §4);
- `after_step(step=...)`: after each optimizer update (K-step model averaging acts here);
- `synchronize()`: make every rank hold the same model, before evaluation, a checkpoint and
  the end of the run;
- `take_bytes()`: bytes this rank sent since the last call;
- `state_dict()` / `load_state_dict()` / `incompatibility()` / `per_rank`: what a checkpoint
  must keep of the strategy for an exact resume.

On one process every strategy is a no-op: nothing is wrapped or sent.

`ddp` is synchronous data-parallel SGD (TSM paper §4): DDP's ring all-reduce of gradients, with
the optional compression or PowerSGD hook of `comm_hooks`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any

from torch import nn

from vidscale.distributed.collectives import broadcast_buffers
from vidscale.distributed.comm_hooks import CommConfig, CommHook, attach_comm_hook
from vidscale.distributed.ddp import gradient_sync, unwrap, wrap_ddp
from vidscale.distributed.env import DistEnv


class DataParallel(ABC):
    """The interface the training loop uses (see the module docstring)."""

    #: Whether `state_dict()` differs between ranks (every rank then saves and loads its own).
    per_rank: bool = False

    @abstractmethod
    def wrap(self, model: nn.Module) -> nn.Module: ...

    @abstractmethod
    def micro_batch(self, *, last: bool) -> AbstractContextManager[None]: ...

    @abstractmethod
    def after_step(self, *, step: int) -> None:
        """After optimizer step `step` (1-based, skipped steps included) on every rank."""

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def take_bytes(self) -> int: ...

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def incompatibility(self, state: dict[str, Any]) -> str | None:
        """Why `state` cannot be loaded into this strategy, or None when it can."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state`; raise ValueError (and change nothing) when it does not fit."""


class DDPStrategy(DataParallel):
    """Gradients all-reduced every optimizer step (DDP), through the configured comm hook.

    `synchronize` gives every rank rank 0's buffers: DDP broadcasts them at each forward, but
    BatchNorm's running statistics drift apart within a step, and evaluation and checkpoints
    must see one model.
    """

    def __init__(self, env: DistEnv, comm: CommConfig) -> None:
        self.env, self.comm = env, comm
        self._wrapped: nn.Module | None = None
        self._hook: CommHook | None = None

    def wrap(self, model: nn.Module) -> nn.Module:
        self._wrapped = wrap_ddp(model, self.env, bucket_cap_mb=self.comm.bucket_cap_mb)
        self._hook = attach_comm_hook(self._wrapped, self.comm)
        self.per_rank = self._hook.per_rank
        return self._wrapped

    def micro_batch(self, *, last: bool) -> AbstractContextManager[None]:
        # no_sync on all but the last micro-batch: one all-reduce per optimizer step.
        return gradient_sync(self._model(), sync=last)

    def after_step(self, *, step: int) -> None:
        """Nothing: the all-reduce inside the step already left every rank the same weights."""

    def synchronize(self) -> None:
        broadcast_buffers(unwrap(self._model()))

    def take_bytes(self) -> int:
        return self._comm_hook().take()

    def state_dict(self) -> dict[str, Any]:
        return self._comm_hook().state_dict()

    def incompatibility(self, state: dict[str, Any]) -> str | None:
        return self._comm_hook().incompatibility(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._comm_hook().load_state_dict(state)

    def _model(self) -> nn.Module:
        if self._wrapped is None:
            raise RuntimeError("DDPStrategy.wrap(model) must be called first")
        return self._wrapped

    def _comm_hook(self) -> CommHook:
        if self._hook is None:
            raise RuntimeError("DDPStrategy.wrap(model) must be called first")
        return self._hook


def build_strategy(env: DistEnv, comm: CommConfig) -> DataParallel:
    """The run's data-parallel strategy (today: synchronous SGD through DDP)."""
    return DDPStrategy(env, comm)
