"""The run's checkpoints: what goes into one, writing it, loading it, and stopping at a signal.

Rank 0 writes the model every rank holds (`last.pt` every `train.checkpoint_every_steps` and
at a stop; `epoch_NNNN.pt` at each epoch's end, with `last.pt` a second name of it), atomically
(`checkpoint.save_checkpoint`); each rank writes its strategy's own state beside it (PowerSGD's
residuals, an AAVG learner's replica). Which file a run resumes from, falling back past
damaged ones, is `resume.find_start`; `Checkpointer.load` puts that file's state back.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

from vidscale.atomic import atomic_link
from vidscale.config import ConfigError
from vidscale.distributed.collectives import all_gather_object, barrier
from vidscale.distributed.env import DistEnv
from vidscale.distributed.parallel import DataParallel
from vidscale.distributed.sync.ddp import unwrap
from vidscale.run.checkpoint import (
    LAST,
    first_line,
    prune_checkpoints,
    read_comm_state,
    save_checkpoint,
    save_comm_state,
)
from vidscale.run.record import RunRecord
from vidscale.train.checkpoints.resume import Progress
from vidscale.train.checkpoints.state import Held, PartLoadError, StateRegistry
from vidscale.train.phases.adaptive_batch import AdaptiveBatch
from vidscale.train.phases.phase_switch import PhaseSwitch
from vidscale.train.records.run_log import RunLog
from vidscale.train.survival.resilience import (
    Diverged,
    DivergenceGuard,
    Preempted,
    StopSignals,
    weights_finite,
)
from vidscale.train.survival.watchdog import Watchdog


@dataclass
class RunState:
    """The pieces of a run a checkpoint holds, by reference: they change as the run goes."""

    model: nn.Module  # unwrapped: the weights every rank holds
    optimizer: torch.optim.Optimizer
    strategy: DataParallel
    progress: Progress
    run_log: RunLog
    guard: DivergenceGuard
    adaptive: AdaptiveBatch
    phase_switch: PhaseSwitch

    def registry(self) -> StateRegistry:
        """Every checkpointed part by its key in the checkpoint (`state`): the one list that
        saving and loading both read. The strategy's per-rank state is saved beside it."""
        parts = StateRegistry()
        parts.register("model", unwrap(self.model))
        parts.register("optimizer", self.optimizer)
        parts.register("progress", self.progress, exact_only=True)
        log = self.run_log
        parts.register("epoch_totals", Held(log.totals_state, log.load_totals), exact_only=True)
        parts.register("rank_counters", Held(log.counters_state, log.load_counters))
        parts.register("divergence_guard", self.guard, exact_only=True)
        parts.register("adaptive_batch", self.adaptive, exact_only=True, optional=True)
        parts.register("batchnorm_splits", self.phase_switch, optional=True)
        return parts


class Checkpointer:
    """Saves and loads `parts` in `run_dir/checkpoints`. `record` is what every checkpoint
    also says of how the run was made (`record.RunRecord`: its sizes, config, fast path,
    model): fixed at start.
    `save` and `stop` are collectives: every rank calls them."""

    def __init__(
        self,
        run_dir: Path,
        env: DistEnv,
        parts: RunState,
        *,
        record: RunRecord,
        keep: int,
        signals: StopSignals,
        watchdog: Watchdog | None = None,
    ) -> None:
        self.dir = run_dir / "checkpoints"
        self.run_dir, self.env, self.parts = run_dir, env, parts
        self.state = parts.registry()
        self.record, self.keep, self.signals = record, keep, signals
        self.last_good = "none yet"  # named when the run diverges
        self.watchdog = watchdog or Watchdog.disabled()  # each save is one watched unit

    # -- load --------------------------------------------------------------------------------
    def load(self, state: dict[str, Any], *, exact: bool, source: Path | None) -> None:
        """Put checkpoint `state` (read from `source`) back into the run: every registered
        part, those that describe the plan only if `exact` (the same run continues, not a
        carried-over change of sizes). A checkpoint of another model is a `ConfigError`."""
        try:
            self.state.load_state_dict(state, exact=exact)
        except PartLoadError as err:
            cause = first_line(err.__cause__ or err)
            raise ConfigError(
                f"--resume: {source} does not fit this run: {err.key}: {cause}"
            ) from None
        self.last_good = f"{source} (step {state['progress']['step']})"
        self._load_strategy(int(state["progress"]["step"]))

    def _load_strategy(self, step: int) -> None:
        """The strategy's per-rank state, saved beside last.pt: every rank loads it or none
        does; a missing, stale or unfitting file (a resume from an epoch file, or on another
        process count) starts that state afresh (`strategy.fresh_start`), with a warning."""
        strategy = self.parts.strategy
        if not strategy.per_rank:
            return
        saved, problem = read_comm_state(strategy, self.dir, rank=self.env.rank, step=step)
        problems = sorted({p for p in all_gather_object(problem) if p is not None})
        if problems:
            self.parts.run_log.say(f"warning: {strategy.fresh_start} ({'; '.join(problems)})")
            return
        assert saved is not None
        strategy.load_state_dict(saved)

    # -- save --------------------------------------------------------------------------------
    def save(self, *, epoch_end: bool) -> None:
        """Checkpoint where the run is. Weights that are not finite are never written: the
        last good checkpoint must survive rotation (`Diverged` instead)."""
        with self.watchdog.watching("checkpoint", f"checkpoint at step {self.parts.progress.step}"):
            self._save(epoch_end=epoch_end)

    def _save(self, *, epoch_end: bool) -> None:
        parts, step = self.parts, self.parts.progress.step
        if not weights_finite(parts.model, device=self.env.device):
            raise Diverged(f"weights not finite at step {step}; last good: {self.last_good}")
        parts.run_log.tick()
        # Each rank's own state first (an AAVG learner's replica between averagings) ...
        save_comm_state(parts.strategy, self.dir, rank=self.env.rank, step=step)
        with parts.strategy.consensus():  # ... then rank 0 writes the model every rank holds.
            # Every rank: the run's counters are gathered, also the barrier that puts every
            # rank's file before the last.pt that names it.
            state = self.state.state_dict()
            if self.env.is_main:
                self._write({**state, **self.record.state()}, epoch_end=epoch_end)
        # No rank leaves before the checkpoint is on disk: one restarted at once must find it.
        barrier()
        self.last_good = f"{self.dir / LAST} (step {step})"

    def _write(self, state: dict[str, Any], *, epoch_end: bool) -> None:
        if not epoch_end:
            save_checkpoint(state, self.dir / LAST)
            return
        epoch = self.parts.progress.epoch
        epoch_file = self.dir / f"epoch_{epoch:04d}.pt"
        save_checkpoint(state, epoch_file)
        # The same state: last.pt becomes a second name of the epoch's file, not a second write.
        atomic_link(epoch_file, self.dir / LAST)
        prune_checkpoints(self.run_dir, keep=self.keep, newest=epoch)

    def stop(self) -> NoReturn:
        """Checkpoint where the run is and raise `Preempted` (once every rank agreed to stop)."""
        self.save(epoch_end=False)
        got = self.signals.received
        why = signal.Signals(got).name if got is not None else "a stop signal on another rank"
        raise Preempted(
            f"stopped by {why} at step {self.parts.progress.step}; checkpoint "
            f"{self.dir / LAST}; the same command continues the run"
        )
