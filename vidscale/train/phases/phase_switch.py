"""What changes in the model when a run enters a new phase: its BatchNorm mode.

Wu et al. §3.3 (PySlowFast `MULTIGRID.BN_BASE_SIZE`): BN statistics are kept over a fixed number
of clips whatever the per-process batch. A phase whose batch is larger runs sub-batch BN
(`models.batchnorm`, interleaved groups of clips); one whose batch is smaller synchronises BN
over groups of processes (`distributed.sync_batchnorm`, `torch.nn.SyncBatchNorm`) where the
processes run on CUDA. CPU processes cannot (SyncBatchNorm normalises CUDA tensors only), nor can
one process whose "devices" are the micro-batches of an accumulated step: such a phase runs plain
BN over its smaller batch, and says why once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

from vidscale.distributed.env import DistEnv
from vidscale.distributed.sync_batchnorm import set_batchnorm_sync, sync_group_size
from vidscale.models.batchnorm import load_split_state, set_batchnorm_splits, split_state
from vidscale.run.timeline import Phase
from vidscale.train.records.run_log import RunLog


class PhaseSwitch:
    """Puts the model in each phase's BatchNorm mode as the run reaches it."""

    def __init__(self, model: nn.Module, env: DistEnv) -> None:
        self.model = model
        self.env = env
        self.current: Phase | None = None
        self.reported: Phase | None = None
        self.splits = 1  # sub-batch BN groups of clips in every layer now
        self.sync = 1  # processes per synchronised-BN group in every layer now

    def enter(self, phase: Phase, *, log: RunLog | None = None, step: int = 0) -> Phase:
        """Make `phase` the current one (no-op when it already is) and, given a `log`, announce
        it there and on the console once; returns it."""
        if phase != self.current:
            self.current = phase
            splits = phase.bn_splits if phase.bn_mode == "sub_batchnorm" else 1
            sync = self._sync_size(phase)
            self._set_batchnorm(splits=splits, sync=sync)
        if log is not None and self.reported != phase:
            self.reported = phase
            plain = (len(phase.shapes), phase.lr_factor, phase.bn_mode) == (1, 1.0, "batchnorm")
            if phase.first_epoch > 0 or not plain:  # a plain run has nothing to announce
                self._report(phase, log, step=step)
        return phase

    def _report(self, phase: Phase, log: RunLog, *, step: int) -> None:
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
        if phase.bn_mode != "sync_batchnorm":
            return "plain BN"
        size = self._sync_size(phase)
        if size > 1:
            return f"BN synchronised over groups of {size} processes"
        if not self.env.distributed:
            why = f"its {phase.bn_splits} devices are micro-batches of one process"
        elif self.env.device.type != "cuda":
            why = "BN synchronisation needs CUDA processes"
        else:
            why = f"no group of {phase.bn_splits} divides the {self.env.world_size} processes"
        return (
            f"plain BN ({why}: statistics come from each process's smaller batch, not the "
            f"{phase.bn_splits} devices asked for)"
        )

    def _sync_size(self, phase: Phase) -> int:
        if phase.bn_mode != "sync_batchnorm":
            return 1
        return sync_group_size(self.env, phase.bn_splits)

    def _set_batchnorm(self, *, splits: int, sync: int) -> None:
        """Every BN layer in `splits` sub-batch groups or synchronised over `sync` processes
        (at most one of them above 1); layers already so are left alone."""
        if (splits, sync) == (self.splits, self.sync):
            return
        if self.sync != 1:
            set_batchnorm_sync(self.model, 1)
        if splits != self.splits:
            set_batchnorm_splits(self.model, splits)
        if sync != 1:
            set_batchnorm_sync(self.model, sync)
        self.splits, self.sync = splits, sync

    @contextmanager
    def plain_batchnorm(self) -> Iterator[None]:
        """Plain BN inside (precise BN at the base shape and batch, each process on its own);
        the phase's sub-batch groups (each starting from the plain statistics) or synchronised
        groups afterwards."""
        splits, sync = self.splits, self.sync
        self._set_batchnorm(splits=1, sync=1)
        try:
            yield
        finally:
            self._set_batchnorm(splits=splits, sync=sync)

    def state_dict(self) -> dict[str, Tensor]:
        """The sub-batch BN groups' running statistics (the model's state_dict holds their
        aggregate): what an exact resume needs besides the model."""
        return split_state(self.model) if self.splits > 1 else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and self.splits > 1:
            load_split_state(self.model, state)
