"""What changes in the model when a run enters a new phase: its BatchNorm mode.

Wu et al. §3.3 (PySlowFast `MULTIGRID.BN_BASE_SIZE`): BN statistics are kept over a fixed number
of clips whatever the per-process batch. A phase whose batch is larger runs sub-batch BN
(`models.batchnorm`, interleaved groups of clips); one whose batch is smaller would need BN
synchronised across devices, which this build does not do: such a phase runs plain BN over its
smaller batch, and says so once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

from vidscale.distributed.env import DistEnv
from vidscale.models.batchnorm import load_split_state, set_batchnorm_splits, split_state
from vidscale.train.metrics import MetricsLog
from vidscale.train.plan import Phase


class PhaseSwitch:
    """Puts the model in each phase's BatchNorm mode as the run reaches it."""

    def __init__(self, model: nn.Module, env: DistEnv) -> None:
        self.model = model
        self.env = env
        self.current: Phase | None = None
        self.reported: Phase | None = None
        self.splits = 1

    def enter(self, phase: Phase, *, log: MetricsLog | None = None, step: int = 0) -> Phase:
        """Make `phase` the current one (no-op when it already is) and, given a `log`, announce
        it there and on the console once; returns it."""
        if phase != self.current:
            self.current = phase
            splits = phase.bn_splits if phase.bn_mode == "sub_batchnorm" else 1
            if splits != self.splits:
                set_batchnorm_splits(self.model, splits)
                self.splits = splits
        if log is not None and self.reported != phase:
            self.reported = phase
            plain = (len(phase.shapes), phase.lr_factor, phase.bn_mode) == (1, 1.0, "batchnorm")
            if phase.first_epoch > 0 or not plain:  # a plain run has nothing to announce
                self._report(phase, log, step=step)
        return phase

    def _report(self, phase: Phase, log: MetricsLog, *, step: int) -> None:
        shapes = [[s.frames, s.crop, s.micro_batch] for s in phase.shapes]
        log.write(
            "phase",
            step=step,
            epoch=phase.first_epoch,
            shapes=shapes,
            accumulate=phase.accumulate,
            global_batch=phase.global_batch,
            lr_factor=phase.lr_factor,
            bn_mode=phase.bn_mode,
            bn_splits=phase.bn_splits,
        )
        if not self.env.is_main:
            return
        cycle = ", ".join(f"{f}x{c}^2 x {b}" for f, c, b in shapes)
        bn = self.describe_batchnorm(phase)
        print(
            f"vidscale: epochs {phase.first_epoch + 1}-{phase.end_epoch}: clips {cycle} "
            f"per micro-batch, global batch {phase.global_batch}, LR x {phase.lr_factor:g}, {bn}",
            flush=True,
        )

    def describe_batchnorm(self, phase: Phase) -> str:
        if phase.bn_mode == "sub_batchnorm":
            return f"sub-batch BN in {phase.bn_splits} groups"
        if phase.bn_mode == "sync_batchnorm":
            return (
                f"plain BN (synchronising BN over {phase.bn_splits} devices is not supported: "
                "statistics come from each process's smaller batch)"
            )
        return "plain BN"

    @contextmanager
    def plain_batchnorm(self) -> Iterator[None]:
        """Plain BN inside (precise BN at the base shape and batch); the phase's sub-batch
        groups afterwards, each starting from the plain statistics."""
        splits = self.splits
        if splits > 1:
            set_batchnorm_splits(self.model, 1)
            self.splits = 1
        try:
            yield
        finally:
            if splits > 1:
                set_batchnorm_splits(self.model, splits)
                self.splits = splits

    def state_dict(self) -> dict[str, Tensor]:
        """The sub-batch BN groups' running statistics (the model's state_dict holds their
        aggregate): what an exact resume needs besides the model."""
        return split_state(self.model) if self.splits > 1 else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and self.splits > 1:
            load_split_state(self.model, state)
