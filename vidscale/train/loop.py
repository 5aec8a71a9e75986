"""The training entry point: `train(cfg, run_dir=...)`, and the `Trainer` that runs the epochs.

The trainer keeps the epoch loop, evaluation and the batch adaptation between epochs, and calls
its collaborators at named points: the step (`step.run.train_step`), the checkpointer
(`checkpointer.Checkpointer`: load, save, stop) and the run log (`run_log.RunLog`). The LR is a
pure function of the position in the run's `timeline.Timeline`, so resume is exact. A run
survives (`resilience`, `resume`): it continues from its newest loadable checkpoint, checkpoints
and exits on SIGTERM / SIGINT / SIGUSR1 at the next step, and skips non-finite steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from vidscale.config import RunConfig, to_dict, validate
from vidscale.distributed.collectives import broadcast_object
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.distributed.peers.failure import fail_together
from vidscale.distributed.strategy import build_strategy
from vidscale.fastpath.threads import set_threads
from vidscale.optim.factory import build_optimizer
from vidscale.run.data import load_data
from vidscale.run.timeline import Phase, make_timeline
from vidscale.scoring.evaluate import EvalResult, Stream, evaluate
from vidscale.scoring.precision import announce, scoring_arithmetic
from vidscale.step.run import StepResult, seed_step, train_step
from vidscale.train import builders
from vidscale.train.checkpoints.resume import ResumeMode, Start, find_start, prepare_run_dir
from vidscale.train.phases.adaptive_batch import AdaptiveBatch, sizes_for_batch
from vidscale.train.phases.phase_switch import PhaseSwitch
from vidscale.train.phases.precise_bn import pooled_precise_bn
from vidscale.train.records.loggers import LoggerChoice
from vidscale.train.records.run_log import RunLog
from vidscale.train.survival.resilience import (
    BatchNormSnapshot,
    Diverged,
    DivergenceGuard,
    Preempted,
    StopSignals,
    any_rank,
)
from vidscale.train.survival.watchdog import Watchdog
from vidscale.train.wiring import build_checkpointer, step_context, stop_loader_workers


class Trainer:
    """One run: its built pieces, the epoch loop, evaluation and the batch adaptation.

    It owns a `Checkpointer` (`self.checkpointer`) and a `RunLog` (`self.run_log`) and runs each
    optimizer step through `train_step` with the `StepContext` built once (`self.step_context`).
    """

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        env: DistEnv,
        *,
        resume: ResumeMode = "auto",
        signals: StopSignals | None = None,
    ) -> None:
        validate(cfg)
        loggers = LoggerChoice.checked(cfg.train)  # a missing package stops the run here
        cfg, splits = load_data(cfg)
        self.cfg, self.run_dir, self.env, self.splits = cfg, run_dir, env, splits
        self.signals = signals or StopSignals()
        set_threads(cfg, env)
        self.host_memory_retained = builders.retain_host_memory(cfg, env)
        start = find_start(cfg, run_dir, env, mode=resume, train_size=len(splits.train))
        self.resumed_from, state = start.path, start.state
        self._build_model(start)
        # The sizes the run was started with (what checkpoints record and resume checks), and
        # those it follows now: the same unless the batch size adapted.
        self.start_sizes, self.progress = start.sizes, start.progress
        self._build_schedule()
        self.train_data = builders.build_train_data(
            cfg, env, splits.train, micro_batch=self.sizes.micro_batch
        )
        self.val_loader = builders.build_eval_loader(cfg, env, splits.val)
        self.prepare = builders.model_input(cfg)
        self.run_log = RunLog(
            env, log_every=cfg.train.log_every, show_progress=cfg.train.progress, loggers=loggers
        )
        self.guard = DivergenceGuard.of_run(cfg.train.max_bad_steps, bf16=self.fast.bf16)
        self.bn_snapshot = BatchNormSnapshot(self.model)
        self.watchdog = Watchdog.for_run(cfg, run_dir, env, self.train_data.loader, self.val_loader)
        self.checkpointer = build_checkpointer(self)
        self.step_context = step_context(self)
        if state is not None:
            self.checkpointer.load(state, exact=start.exact, source=self.resumed_from)
            self._follow_batch()  # the adaptive batch a resumed run had reached
        steps_left = self.timeline.total_steps - self.progress.step
        self.run_log.announce_start(self.fast, self.fast_choice, steps_left, self.sizes.accumulate)
        if env.is_main:
            prepare_run_dir(run_dir, cfg, start, classes=splits.classes)
        resumed_at = self.progress.step if state else None
        self.run_log.open(run_dir, resumed_at=resumed_at, config=to_dict(cfg))

    def _build_model(self, start: Start) -> None:
        """The fast path, the model (fresh weights only without a checkpoint to load), its
        optimizer and the gradient strategy that wraps it."""
        cfg, env = self.cfg, self.env
        # "auto" measured at the base shape, or the resumed run's recorded choice; the same
        # on every rank, and leaving every random stream untouched.
        self.fast_choice = builders.decide_fast_path(
            cfg, env, checkpoint=start.record, micro_batch=start.sizes.micro_batch
        )
        self.fast = builders.fast_path(cfg, env, decision=self.fast_choice)
        self.autocast = self.fast.autocast()
        # Evaluation scores by the rule of every score (fp32 unless asked), not the training's.
        self.eval_arithmetic = scoring_arithmetic(cfg.train.eval_precision, env.device)
        announce(self.eval_arithmetic, is_main=env.is_main)
        torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank and run
        self.model = builders.build_model(cfg, env, self.fast, fresh=start.state is None)
        if self.fast.compile:
            self.model.compile()  # in place: state_dict keys and DDP's no_sync stay as they are
        self.optimizer = build_optimizer(self.model, cfg.optim, lr=0.0)
        self.strategy = build_strategy(env, cfg.comm, name=cfg.dist.strategy, aavg=cfg.aavg)
        self.ddp_model = self.strategy.wrap(self.model, self.optimizer)

    def _build_schedule(self) -> None:
        """The start's batch size (a resume restores an adapted one with the other checkpointed
        parts), its sizes and timeline, and the phase the model enters at the current epoch."""
        cfg, env = self.cfg, self.env
        self.adaptive = AdaptiveBatch.from_config(
            cfg, world_size=env.world_size, global_batch=self.start_sizes.global_batch
        )
        self.sizes, self.timeline = self.start_sizes, make_timeline(cfg, self.start_sizes)
        self.phase_switch = PhaseSwitch(self.model, env)
        self.phase_switch.enter(self.timeline.phase_at(self.progress.epoch))

    # -- epochs ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        p = self.progress
        while p.epoch < self.timeline.epochs:
            self.train_epoch()
            done = p.epoch + 1
            val = self.evaluate() if self._evaluates_after(done) else None
            lr = self.timeline.lr(epoch=p.epoch, step_in_epoch=p.step_in_epoch)
            epochs = self.timeline.epochs
            self.run_log.epoch_done(val, step=p.step, epochs_done=done, epochs=epochs, lr=lr)
            p.epoch += 1
            p.step_in_epoch = 0
            if val is not None and self.adaptive.due(epochs_done=done):
                self.adapt_batch(val.score, epochs_done=done)
            self.checkpointer.save(epoch_end=True)
            if any_rank(self.signals.requested, device=self.env.device):
                self.checkpointer.stop()  # a signal during evaluation: the epoch is saved
        return self.finish()

    def _evaluates_after(self, epochs_done: int) -> bool:
        return self.timeline.evaluates_after(
            epochs_done, every=self.cfg.train.eval_every
        ) or self.adaptive.due(epochs_done=epochs_done)

    def adapt_batch(self, accuracy: float, *, epochs_done: int) -> None:
        """Alg. 1 lines 13-21 (`adaptive_batch`): rank 0 decides from `accuracy`, every rank
        applies the decision from the next epoch on."""
        if self.env.is_main:
            self.adaptive.observe(accuracy, epochs_done=epochs_done)
        self.adaptive.load_state_dict(broadcast_object(self.adaptive.state_dict()))
        if self._follow_batch():
            self.run_log.batch_adapted(
                self.sizes,
                self.adaptive,
                accuracy=accuracy,
                step=self.progress.step,
                epoch=epochs_done,
            )

    def _follow_batch(self) -> bool:
        """Sizes and timeline for the adaptive batch's global batch; whether they changed. The
        loader follows the timeline from the next epoch it sets up."""
        sizes = sizes_for_batch(self.cfg, self.start_sizes, global_batch=self.adaptive.global_batch)
        if sizes == self.sizes:
            return False
        self.sizes, self.timeline = sizes, make_timeline(self.cfg, sizes)
        return True

    def train_epoch(self) -> None:
        p = self.progress
        phase = self.phase_switch.enter(
            self.timeline.phase_at(p.epoch), log=self.run_log, step=p.step
        )
        self.train_data.set_epoch(
            p.epoch, step_in_epoch=p.step_in_epoch, phase=phase, base=self.cfg.data.train_clip
        )
        batches = iter(self.train_data.loader)
        self.ddp_model.train()
        desc = f"epoch {p.epoch + 1}/{self.timeline.epochs}"
        bar = self.run_log.progress_bar(phase.steps_per_epoch, desc=desc, initial=p.step_in_epoch)
        while p.step_in_epoch < phase.steps_per_epoch:
            result = self.step(batches, phase)
            bar.update(1)
            bar.set_postfix(self.run_log.progress_fields(result))
            if result.agreed.stop:
                bar.close()
                self.checkpointer.stop()
            every = self.cfg.train.checkpoint_every_steps
            if every and p.step % every == 0:
                self.checkpointer.save(epoch_end=False)
        bar.close()
        del batches

    def step(self, batches: Iterator[dict[str, Any]], phase: Phase) -> StepResult:
        """One optimizer step and what follows it: a step that was not finite on some rank is
        skipped everywhere (its BatchNorm statistics restored too)."""
        p = self.progress
        lr = self.timeline.lr(epoch=p.epoch, step_in_epoch=p.step_in_epoch)
        shape = phase.shape_at(p.step_in_epoch)  # a new shape's first step may compile
        clips = shape.micro_batch * phase.accumulate
        seed_step(self.cfg, self.env, p.step)
        self.bn_snapshot.take()
        with self.watchdog.watching("step", f"step {p.step + 1} of epoch {p.epoch + 1}", key=shape):
            result = train_step(
                self.step_context, batches, accumulate=phase.accumulate, clips=clips, lr=lr
            )
        p.step += 1
        p.step_in_epoch += 1
        if not result.applied:
            self.bn_snapshot.restore()  # the skipped forward passes must not count either
            self.run_log.skipped_step(result, step=p.step, epoch=p.epoch)
        self.guard.record(result, step=p.step, last_good=self.checkpointer.last_good)
        self.run_log.step_done(result)
        epoch_end = p.step_in_epoch == phase.steps_per_epoch
        self.strategy.after_step(step_in_epoch=p.step_in_epoch, epoch_end=epoch_end)
        traffic, own_record = self.strategy.take_traffic(), self.strategy.log_each_round
        self.run_log.traffic(traffic, step=p.step, epoch=p.epoch, own_record=own_record)
        self.run_log.train_record(result, step=p.step, epoch=p.epoch)
        return result

    def evaluate(self) -> EvalResult:
        """Top-1/top-5 and loss (and mAP for multi-label data) on the validation split, the
        same model on every rank."""
        with self.strategy.consensus():  # every rank evaluates the same model
            if self.cfg.multigrid.enabled and self.cfg.multigrid.precise_bn_batches:
                self._precise_bn(self.cfg.multigrid.precise_bn_batches)
            with self.watchdog.watching("eval", f"evaluation at step {self.progress.step}") as w:
                result = evaluate(
                    Stream(self.model, self.prepare),
                    w.each(self.val_loader),
                    device=self.env.device,
                    autocast=self.eval_arithmetic.autocast(),
                    multi_label=self.cfg.data.eval_aggregate if self.cfg.data.multi_label else None,
                )
        self.run_log.evaluated(result)
        return result

    def _precise_bn(self, batches: int) -> None:
        """Multigrid: BN statistics over `batches` batches of the recipe's own clip shape and
        batch, then pooled over ranks (`pooled_precise_bn`)."""
        loader = self.train_data.base_shape_batches(
            self.progress.epoch, batches=batches, size=self.sizes.micro_batch
        )
        inputs = (self.prepare(b["inputs"], self.env.device) for b in loader)
        with self.phase_switch.plain_batchnorm():
            pooled_precise_bn(self.model, inputs, num_batches=batches, autocast=self.autocast)

    def finish(self) -> dict[str, Any]:
        return self.run_log.finish(
            model=self.cfg.model.name,
            world_size=self.env.world_size,
            global_batch=self.sizes.global_batch,
            epochs=self.timeline.epochs,
            num_classes=self.cfg.model.num_classes,
            extra={
                "recipe": self.cfg.recipe,
                "base_lr": self.sizes.base_lr,
                "strategy": self.cfg.dist.strategy,
                "batch_history": [list(h) for h in self.adaptive.history],
                "host_memory_retained": self.host_memory_retained,
                "eval_precision": self.eval_arithmetic.precision,
            },
        )


def train(cfg: RunConfig, *, run_dir: Path, resume: ResumeMode = "auto") -> dict[str, Any]:
    """Train (and evaluate every epoch) as one process or one rank of a torchrun job.

    Continues the run in `run_dir` if it has a checkpoint (`resume`, see `train.checkpoints.resume`).
    Raises `Preempted` after checkpointing on a stop signal, `Diverged` when steps stay
    non-finite.
    """
    env = init_distributed(cfg.train.device, timeout_s=cfg.dist.timeout_s, backend=cfg.dist.backend)
    signals = StopSignals()
    # A rank that fails or is cut off stops the others in seconds (not at the collective
    # timeout); a stop or a divergence is agreed by all ranks, so it is no failure of one.
    peers = fail_together(env, expected=(Preempted, Diverged), silence_s=cfg.dist.peer_silence_s)
    with peers as watch, signals.installed():
        trainer = Trainer(replace(cfg), run_dir, env, resume=resume, signals=signals)
        watch.phase = trainer.watchdog.phase  # a lost peer's line names what the run was in
        try:
            with trainer.watchdog.running():  # a stalled step ends the rank (`watchdog`)
                return trainer.run()
        finally:
            trainer.run_log.close(completed=False)  # closed already when the run completed
            stop_loader_workers(trainer)
