"""The loop shared by the layer-wise optimizers (LARS, LAMB): one update per parameter tensor.

Both papers adapt the step per layer (per parameter tensor), so an update needs only that
tensor, its gradient and its group's settings; subclasses implement `_update`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import torch


class LayerwiseOptimizer(torch.optim.Optimizer, metaclass=abc.ABCMeta):
    """`step()` calls `_update(param, group)` for every parameter that has a gradient."""

    @torch.no_grad()
    # torch declares step() as two overloads; this one signature covers both.
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every parameter that has a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(param, group)
        return loss

    @abc.abstractmethod
    def _update(self, param: torch.Tensor, group: dict[str, Any]) -> None:
        """Update `param` in place from its gradient and its group's settings."""
