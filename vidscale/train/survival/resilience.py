"""What keeps a run alive: stop signals, the divergence guard, skipped steps' BN statistics.

- **Stop signals.** SIGTERM (preemption, `scancel`, torchrun stopping its workers), SIGINT
  (Ctrl-C) and SIGUSR1 (SLURM `--signal=USR1@SECONDS` before a time limit) only set a flag. At
  the next step boundary every rank learns whether any rank got one (`step.agreement.agree_step`), all write an
  exact mid-epoch checkpoint and the process exits with `PREEMPTED_EXIT_CODE`; the same command
  continues the run. A second Ctrl-C stops at once.
- **One agreement per step** (`step.agreement`). A single all-reduce of five numbers per optimizer step carries the
  step's loss, hits and clips (so logged losses and epoch metrics are over all ranks), whether
  any rank saw a non-finite loss or gradient norm, and whether any rank was asked to stop.
- **Divergence guard.** A non-finite step is skipped on every rank: no optimizer update, and the
  BatchNorm statistics its forward passes changed are put back. More than `max_bad_steps` in a
  row stop the run, naming the steps, what was first not finite (the loss, or the first
  parameter whose gradient was) and the last good checkpoint; when no step since the start
  applied an update, the line says so, and names bf16 autocast where the run used it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import torch
from torch import nn

from vidscale.distributed.collectives import all_gather_object, all_reduce_sum

# EX_TEMPFAIL of sysexits.h ("temporary failure; the user is invited to retry"): torchrun
# restarts a worker group that exits non-zero while it has restarts left, and a SLURM batch
# script can requeue on it (`[ $? -eq 75 ] && scontrol requeue $SLURM_JOB_ID`).
PREEMPTED_EXIT_CODE = 75
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class Preempted(Exception):
    """The run checkpointed and stopped because a rank received a stop signal."""


class Diverged(Exception):
    """The loss or gradient norm stayed non-finite, or the weights became non-finite."""


class StopSignals:
    """Turns SIGTERM / SIGINT / SIGUSR1 into a flag read at step boundaries."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    @contextmanager
    def installed(self) -> Iterator[StopSignals]:
        """Handle the signals while the block runs (only from the main thread, where Python
        delivers signals; elsewhere, e.g. inside a test harness thread, nothing is installed)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        for sig in STOP_SIGNALS:
            self._previous[int(sig)] = signal.signal(sig, self._handle)
        try:
            yield self
        finally:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)  # type: ignore[arg-type]
            self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait
        self.received = signum
        name = signal.Signals(signum).name
        # os.write, not print: a handler that interrupts a print must not print (reentrancy).
        os.write(2, f"vidscale: {name} received; checkpointing at the next step\n".encode())

    @property
    def requested(self) -> bool:
        return self.received is not None


def any_rank(flag: bool, *, device: torch.device) -> bool:
    """Whether `flag` holds on some rank (a collective: every rank must call it)."""
    values = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64, device=device)
    return bool(all_reduce_sum(values).item() > 0)


class BatchNormSnapshot:
    """The buffers (BatchNorm running statistics and batch counts) at the start of a step, to
    put back when the step is skipped: a non-finite forward pass has already folded into them."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.buffers = list(model.buffers())
        self.saved = [b.detach().clone() for b in self.buffers]

    def take(self) -> None:
        buffers = list(self.model.buffers())
        if len(buffers) != len(self.buffers) or any(
            a is not b for a, b in zip(buffers, self.buffers, strict=True)
        ):  # a phase switched the BatchNorm layers: snapshot the new buffers
            self.buffers = buffers
            self.saved = [b.detach().clone() for b in buffers]
        elif buffers:
            torch._foreach_copy_(self.saved, buffers)

    def restore(self) -> None:
        if self.buffers:
            torch._foreach_copy_(self.buffers, self.saved)


BF16_HINT = "; they were computed in bf16 autocast: --set train.amp=off trains in fp32"


class _Step(Protocol):
    @property
    def applied(self) -> bool: ...
    @property
    def nonfinite(self) -> str: ...


@dataclass
class DivergenceGuard:
    """Counts non-finite steps in a row; too many stop the run, naming what was first not
    finite. A run none of whose steps since it started applied an update says so: its
    arithmetic, not its data, is the likely cause (`hint`: what to try, e.g. `BF16_HINT`)."""

    max_bad_steps: int
    consecutive: int = 0
    hint: str = ""
    applied: int = 0  # steps of this start that applied an update (not checkpointed)
    first_nonfinite: str = ""  # of the current run of bad steps, as this rank saw it

    @classmethod
    def of_run(cls, max_bad_steps: int, *, bf16: bool) -> DivergenceGuard:
        """The guard of a run that trains in bf16 autocast or not (what its hint names)."""
        return cls(max_bad_steps, hint=BF16_HINT if bf16 else "")

    def record(self, result: _Step, *, step: int, last_good: str) -> None:
        """`step` (1-based) applied its update or was skipped; raise `Diverged` past the
        limit."""
        if result.applied:
            self.consecutive, self.first_nonfinite = 0, ""
            self.applied += 1
            return
        self.consecutive += 1
        if self.consecutive == 1:
            self.first_nonfinite = result.nonfinite
        if self.consecutive > self.max_bad_steps:
            first = step - self.consecutive + 1
            steps = f"steps {first}-{step} not finite ({self.consecutive} in a row > "
            steps += f"train.max_bad_steps={self.max_bad_steps}; first {self._first_seen()})"
            if self.applied == 0:
                steps = f"no step since this start applied an update: {steps}{self.hint}"
            raise Diverged(f"{steps}; last good checkpoint: {last_good}")

    def _first_seen(self) -> str:
        """What the lowest rank that saw something named first, e.g. "the gradient of
        conv.weight on rank 1" (a collective: every rank gives up at the same step)."""
        seen = all_gather_object(self.first_nonfinite)
        named = [(rank, what) for rank, what in enumerate(seen) if what]
        if not named:
            return "unknown"
        rank, what = named[0]
        return what if len(seen) == 1 else f"{what} on rank {rank}"

    def state_dict(self) -> dict[str, int]:
        return {"bad_steps_in_a_row": self.consecutive}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.consecutive = int(state["bad_steps_in_a_row"])


def weights_finite(model: nn.Module, *, device: torch.device) -> bool:
    """Whether every parameter and float buffer is finite on every rank (a collective)."""
    tensors = [t for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()]
    ok = bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all()) if tensors else True
    return not any_rank(not ok, device=device)
