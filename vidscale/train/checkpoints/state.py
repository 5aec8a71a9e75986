"""What a checkpoint holds: one protocol for every checkpointed part, and the registry of them.

Every piece of a run's state that a resume must put back (the weights, the optimizer, progress,
the epoch's totals, every rank's counters, the divergence guard, the adaptive batch, the
BatchNorm splits) is a `Stateful`: `state_dict()` and `load_state_dict(state)`, as torch's
modules and optimizers already are (torchtitan's `Stateful` checkpointing is the model). The
trainer registers each part under its checkpoint key once (`StateRegistry.register`); the checkpointer
saves `StateRegistry.state_dict()` and restores with `StateRegistry.load_state_dict`, so a new piece of state
is one class and one `register` line, and `tests/train/checkpoints/test_state.py` round-trips
every registered part.

The strategy's per-rank state (PowerSGD's residuals, an AAVG learner's replica) is the one
part kept outside: it lives in a file per rank beside `last.pt`, and whether to load it is a
collective decision (`Checkpointer._load_strategy`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    """A checkpointed part: `load_state_dict(state_dict())` puts it back as it was."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any, /) -> Any: ...


@dataclass(frozen=True)
class Held:
    """A `Stateful` view of state its owner replaces rather than updates in place (a fresh
    `EpochTotals` each epoch): `get` reads the current value, `put` installs a loaded one."""

    get: Callable[[], Any]
    put: Callable[[Any], None]

    def state_dict(self) -> Any:
        return self.get()

    def load_state_dict(self, state: Any, /) -> None:
        self.put(state)


@dataclass(frozen=True)
class Part:
    stateful: Stateful
    exact_only: bool  # restored only when the same run continues (not after a plan change)
    since_format: bool  # False: absent from checkpoints written before it existed


class PartLoadError(Exception):
    """A checkpoint's entry for `key` does not fit the part registered under it."""

    def __init__(self, key: str, cause: BaseException) -> None:
        super().__init__(f"{key}: {cause}")
        self.key = key


class StateRegistry:
    """The registry of a run's checkpointed parts, by checkpoint key, in registration order."""

    def __init__(self) -> None:
        self._parts: dict[str, Part] = {}

    def register(
        self, key: str, stateful: Stateful, *, exact_only: bool = False, optional: bool = False
    ) -> None:
        """Checkpoint `stateful` under `key`. `exact_only`: it describes the run's plan (its
        progress, its batch), so a resume that carries a changed plan over keeps the value the
        plan rule gave (`resume.resolve_start`). `optional`: checkpoints written before this part
        existed lack it, and it then keeps its fresh state."""
        if key in self._parts:
            raise KeyError(f"checkpoint key {key!r} registered twice")
        if not isinstance(stateful, Stateful):
            raise TypeError(f"{key!r}: {type(stateful).__name__} has no state_dict/load_state_dict")
        self._parts[key] = Part(stateful, exact_only=exact_only, since_format=not optional)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __getitem__(self, key: str) -> Stateful:
        return self._parts[key].stateful

    def state_dict(self) -> dict[str, Any]:
        """Every part's state by key. Every rank calls it: a part may gather across ranks."""
        return {key: part.stateful.state_dict() for key, part in self._parts.items()}

    def load_state_dict(self, state: dict[str, Any], *, exact: bool) -> list[str]:
        """Put every part back from checkpoint `state`; returns the keys restored. Raises
        `PartLoadError` naming the first part whose entry is missing or does not fit."""
        restored = []
        for key, part in self._parts.items():
            if part.exact_only and not exact:
                continue
            if key not in state:
                if part.since_format:
                    raise PartLoadError(key, KeyError("missing from the checkpoint"))
                continue
            try:
                part.stateful.load_state_dict(state[key])
            except (RuntimeError, ValueError, KeyError, TypeError) as err:
                raise PartLoadError(key, err) from err
            restored.append(key)
        return restored
