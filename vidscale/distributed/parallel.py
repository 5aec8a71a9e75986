"""The data-parallel strategy interface: how the ranks share the training of one model.

The training loop calls a strategy at named points and never asks which one it has (DESIGN §9):

- `wrap(model, optimizer)`: the module the step calls (DDP's wrapper, or the model itself);
- `micro_batch(last=...)`: the context of one micro-batch's forward and backward; only the last
  of an optimizer step's micro-batches may communicate (gradient accumulation, TSM paper §4);
- `after_step(step_in_epoch=..., epoch_end=...)`: after each optimizer step, skipped or not
  (K-step model averaging acts here);
- `consensus()`: a context inside which every rank holds the same model, for evaluation and
  checkpoints; leaving it, each rank continues exactly as if it had not been entered, so a
  checkpoint never changes the run it is taken from;
- `take_traffic()`: bytes and seconds this rank spent in the strategy's collectives since the
  last call (`Traffic`);
- `state_dict()` / `load_state_dict()` / `incompatibility()` / `per_rank`: what a checkpoint
  must keep of the strategy for an exact resume; `fresh_start` says what happens when a resumed
  run cannot have it.

On one process every strategy is a no-op: nothing is wrapped, averaged or sent.

Each strategy registers itself under its `dist.strategy` name with `register_strategy`; the
registry (`STRATEGIES`) is the one list of names that config validation, the CLI and the
benches read (through `vidscale.distributed.strategy`, which imports every strategy module).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch
from torch import nn

from vidscale.distributed.traffic import Traffic

if TYPE_CHECKING:
    from vidscale.distributed.aavg.config import AAVGConfig
    from vidscale.distributed.env import DistEnv
    from vidscale.distributed.sync.comm_hooks import CommConfig


class DataParallel(ABC):
    """The interface the training loop uses (see the module docstring)."""

    #: The `dist.strategy` name this class is registered under (set by `register_strategy`).
    name: ClassVar[str] = ""
    #: Whether `state_dict()` differs between ranks (every rank then saves and loads its own).
    per_rank: bool = False
    #: Whether each synchronisation round is worth a metrics record of its own (sparse rounds).
    log_each_round: bool = False
    #: What a resume without this strategy's per-rank state does instead (for the warning).
    fresh_start: str = "the strategy starts afresh"

    @classmethod
    @abstractmethod
    def from_config(cls, env: DistEnv, *, comm: CommConfig, aavg: AAVGConfig) -> DataParallel:
        """The strategy for this process, from the run's `comm` and `aavg` sections (each
        strategy reads the section it needs)."""

    @abstractmethod
    def wrap(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module: ...

    @abstractmethod
    def micro_batch(self, *, last: bool) -> AbstractContextManager[None]: ...

    @abstractmethod
    def after_step(self, *, step_in_epoch: int, epoch_end: bool) -> None:
        """After the optimizer step that makes `step_in_epoch` (1-based) steps of this epoch;
        `epoch_end` on its last. Called on every rank, for skipped steps too."""

    @abstractmethod
    def consensus(self) -> AbstractContextManager[None]: ...

    @abstractmethod
    def take_traffic(self) -> Traffic: ...

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def incompatibility(self, state: dict[str, Any]) -> str | None:
        """Why `state` cannot be loaded into this strategy, or None when it can."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state`; raise ValueError (and change nothing) when it does not fit."""


Strategy = TypeVar("Strategy", bound=type[DataParallel])

#: Every registered strategy class by its `dist.strategy` name.
STRATEGIES: dict[str, type[DataParallel]] = {}


def register_strategy(name: str) -> Callable[[Strategy], Strategy]:
    """Class decorator: register a `DataParallel` subclass as `dist.strategy=name`."""

    def register(cls: Strategy) -> Strategy:
        if name in STRATEGIES:
            raise ValueError(f"strategy {name!r} registered twice")
        cls.name = name
        STRATEGIES[name] = cls
        return cls

    return register
