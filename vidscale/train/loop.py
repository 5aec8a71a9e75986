"""The training entry point: `train(cfg, run_dir=...)` and the step you can read on one screen.

Synchronous data-parallel SGD (TSM paper §4): every optimizer step all-reduces gradients over
all ranks (DDP's ring all-reduce); `optim.accumulate = K` runs K micro-batches per step with the
all-reduce only on the last, simulating a K-times larger cluster. LR follows the large-batch recipe
(linear scaling, warmup, cosine) as a pure function of the optimizer step, so resume is exact.

A run survives (`resilience`, `resume`): it continues from its newest loadable checkpoint when
started again, checkpoints and exits on SIGTERM / SIGINT / SIGUSR1 at the next step, and skips
steps whose loss or gradient is not finite on any rank.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vidscale.atomic import atomic_link
from vidscale.config import ConfigError, RunConfig, validate
from vidscale.data.inputs import ModelInput
from vidscale.data.loaders import stop_workers
from vidscale.distributed.averaging import merge_running_statistics
from vidscale.distributed.collectives import (
    all_gather_object,
    all_reduce_max,
    barrier,
    broadcast_object,
)
from vidscale.distributed.ddp import unwrap
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.distributed.failure import fail_together
from vidscale.distributed.strategy import build_strategy
from vidscale.distributed.traffic import Traffic
from vidscale.fastpath.probe import RECORD_KEY
from vidscale.optim.factory import build_optimizer
from vidscale.train import builders
from vidscale.train.adaptive_batch import AdaptiveBatch, plan_for_batch
from vidscale.train.checkpoint import (
    LAST,
    first_line,
    prune_checkpoints,
    read_comm_state,
    save_checkpoint,
    save_comm_state,
)
from vidscale.train.evaluate import EvalResult, Stream, evaluate, topk_hits
from vidscale.train.metrics import MetricsLog, plot_run, progress, read_metrics
from vidscale.train.phase_switch import PhaseSwitch
from vidscale.train.plan import Phase, make_timeline
from vidscale.train.precise_bn import precise_bn
from vidscale.train.resilience import (
    BatchNormSnapshot,
    Diverged,
    DivergenceGuard,
    Preempted,
    StepAgreement,
    StopSignals,
    agree_step,
    any_rank,
    gradient_norm,
    weights_finite,
)
from vidscale.train.resume import ResumeMode, checkpoint_record, find_start, prepare_run_dir
from vidscale.train.summary import EpochTotals, RunCounters, write_summary


@dataclass
class StepResult:
    loss: float  # this rank's mean micro-batch loss
    hits: int
    count: int
    wait_s: float
    grad_norm: float = 0.0
    agreed: StepAgreement | None = None  # over all ranks; set once the step is decided
    lr: float = 0.0
    seconds: float = 0.0
    clips: int = 0  # over all ranks
    skipped: list[tuple[str, str]] = field(default_factory=list)


def seed_step(cfg: RunConfig, env: DistEnv, step: int) -> None:
    """Dropout and any other in-model randomness: a pure function of (seed, rank, step)."""
    torch.manual_seed((cfg.train.seed * 1_000_003 + env.rank * 7_919 + step) % (2**63))


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterator[dict[str, Any]],
    *,
    accumulate: int,
    micro_batch: Callable[[bool], AbstractContextManager[None]],
    clips: int,
    lr: float,
    prepare: ModelInput,
    autocast: Callable[[], Any],
    device: torch.device,
    clip_grad_norm: float = 0.0,
    stop_requested: Callable[[], bool] = lambda: False,
    world_size: int = 1,
) -> StepResult:
    """One optimizer step over `accumulate` micro-batches, each inside `micro_batch(last)`
    (the data-parallel strategy's context: DDP all-reduces on the last only). The model takes
    the batch's input named by `prepare`. Each micro-batch's mean loss is weighted by its share
    of the step's `clips` on this rank.

    The update is applied only if every rank's loss and the gradient norm are finite (agreed in
    one small all-reduce that also carries the step's metrics and any rank's stop request).
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    result = StepResult(loss=0.0, hits=0, count=0, wait_s=0.0, lr=lr)
    for micro in range(accumulate):
        t0 = time.perf_counter()
        batch = next(batches)  # blocked time here is data loading not hidden by compute
        result.wait_s += time.perf_counter() - t0
        inputs = prepare(batch["inputs"], device)
        labels = batch["label"].to(device, non_blocking=True)
        with micro_batch(micro == accumulate - 1), autocast():
            logits = model(inputs)
            mean = nn.functional.cross_entropy(logits.float(), labels)
            loss = mean * labels.numel() / clips
            loss.backward()
        result.loss += loss.item()
        result.hits += int(topk_hits(logits.detach(), labels, 1))
        result.count += labels.numel()
        result.skipped.extend(batch["skipped"])
    result.grad_norm = gradient_norm(model, max_norm=clip_grad_norm)
    finite = math.isfinite(result.loss) and math.isfinite(result.grad_norm)
    result.agreed = agree_step(
        loss=result.loss,
        hits=result.hits,
        clips=result.count,
        finite=finite,
        stop=stop_requested(),  # read late: a signal during this step stops after it
        world_size=world_size,
        device=device,
    )
    if result.agreed.finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return result


class Trainer:
    """Holds the built pieces of one run and runs its epochs."""

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
        splits = builders.load_splits(cfg)
        cfg = builders.resolve_data(cfg, splits.classes)
        self.cfg, self.run_dir, self.env, self.splits = cfg, run_dir, env, splits
        self.signals = signals or StopSignals()
        builders.set_threads(cfg, env)
        self.host_memory_retained = builders.retain_host_memory(cfg, env)
        start = find_start(cfg, run_dir, env, mode=resume, train_size=len(splits.train))
        self.resumed_from, state = start.path, start.state
        self._build_model(state, micro_batch=start.plan.micro_batch)
        # The plan the run was started with (what checkpoints record and resume checks), and
        # the one it follows now: the same unless the batch size adapted.
        self.start_plan, self.progress = start.plan, start.progress
        self._build_schedule(state if start.exact else None)
        self.train_data = builders.build_train_data(
            cfg, env, splits.train, micro_batch=self.plan.micro_batch
        )
        self.val_loader = builders.build_eval_loader(cfg, env, splits.val)
        self.prepare = builders.model_input(cfg)
        self.counters = RunCounters()
        self.totals = EpochTotals()
        self.traffic_since_log = Traffic()
        self.guard = DivergenceGuard(cfg.train.max_bad_steps)
        self.bn_snapshot = BatchNormSnapshot(self.model)
        self.last_good = "none yet"
        if state is not None:
            self._load(state, exact=start.exact)
        if env.is_main:
            print(f"vidscale: {env.world_size} process(es), {self.fast.describe()}", flush=True)
            print(f"vidscale: fast path: {self.fast_choice.describe()}", flush=True)
            prepare_run_dir(run_dir, cfg, start, classes=splits.classes)
        self.log = MetricsLog(
            run_dir, enabled=env.is_main, resumed_at=self.progress.step if state else None
        )
        self._mark = time.perf_counter()

    def _build_model(self, state: dict[str, Any] | None, *, micro_batch: int) -> None:
        """The fast path, the model (fresh weights only without a checkpoint to load), its
        optimizer and the gradient strategy that wraps it."""
        cfg, env = self.cfg, self.env
        # "auto" measured at the base shape, or the resumed run's recorded choice; the same
        # on every rank, and leaving every random stream untouched.
        self.fast_choice = builders.decide_fast_path(
            cfg, env, checkpoint=state, micro_batch=micro_batch
        )
        self.fast = builders.fast_path(cfg, env, decision=self.fast_choice)
        self.autocast = self.fast.autocast()
        torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank and run
        self.model = builders.build_model(cfg, env, self.fast, fresh=state is None)
        if self.fast.compile:
            self.model.compile()  # in place: state_dict keys and DDP's no_sync stay as they are
        self.optimizer = build_optimizer(self.model, cfg.optim, lr=0.0)
        self.strategy = build_strategy(env, cfg.comm, name=cfg.dist.strategy, aavg=cfg.aavg)
        self.ddp_model = self.strategy.wrap(self.model, self.optimizer)

    def _build_schedule(self, exact_state: dict[str, Any] | None) -> None:
        """The batch size now (adapted from the start plan's, restored from `exact_state`, a
        checkpoint resumed exactly), the plan and phase timeline it gives, and the phase the
        model enters at the current epoch."""
        cfg, env = self.cfg, self.env
        self.adaptive = AdaptiveBatch.from_config(
            cfg, world_size=env.world_size, global_batch=self.start_plan.global_batch
        )
        if exact_state is not None and "adaptive_batch" in exact_state:
            self.adaptive.load_state_dict(exact_state["adaptive_batch"])
        self.plan = plan_for_batch(cfg, self.start_plan, global_batch=self.adaptive.global_batch)
        self.timeline = make_timeline(cfg, self.plan)
        self.phase_switch = PhaseSwitch(self.model, env)
        self.phase_switch.enter(self.timeline.phase_at(self.progress.epoch))

    # -- start and checkpoints ---------------------------------------------------------------
    def _load(self, state: dict[str, Any], *, exact: bool) -> None:
        try:
            unwrap(self.model).load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as err:
            raise ConfigError(
                f"--resume: {self.resumed_from} does not fit this run: {first_line(err)}"
            ) from None
        env = self.env
        self.counters = RunCounters.restored(
            state["rank_counters"], rank=env.rank, world_size=env.world_size
        )
        if exact:  # a carried-over plan starts its epoch afresh
            self.totals = EpochTotals(**state["epoch_totals"])
            self.guard.consecutive = int(state["bad_steps_in_a_row"])
        self.phase_switch.load_state_dict(state.get("batchnorm_splits", {}))
        self.last_good = f"{self.resumed_from} (step {state['progress']['step']})"
        self._load_comm(int(state["progress"]["step"]))

    def _load_comm(self, step: int) -> None:
        """The strategy's per-rank state (PowerSGD's residuals, an AAVG learner's replica),
        saved beside last.pt: every rank loads it or none does; a missing, stale or unfitting
        file (a resume from an epoch file, or on another process count) starts that state
        afresh (`strategy.fresh_start`), with a warning."""
        if not self.strategy.per_rank:
            return
        ckpt_dir = self.run_dir / "checkpoints"
        saved, problem = read_comm_state(self.strategy, ckpt_dir, rank=self.env.rank, step=step)
        problems = sorted({p for p in all_gather_object(problem) if p is not None})
        if problems:
            if self.env.is_main:
                joined = "; ".join(problems)
                print(f"vidscale: warning: {self.strategy.fresh_start} ({joined})", flush=True)
            return
        assert saved is not None
        self.strategy.load_state_dict(saved)

    def _state(self, rank_counters: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "model": unwrap(self.model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "progress": self.progress.as_dict(),
            "epoch_totals": self.totals.as_dict(),
            "bad_steps_in_a_row": self.guard.consecutive,
            "rank_counters": rank_counters,
            "adaptive_batch": self.adaptive.state_dict(),
            "batchnorm_splits": self.phase_switch.state_dict(),
            RECORD_KEY: self.fast_choice.record(),  # a resume continues with this setting
            **checkpoint_record(self.cfg, self.start_plan),
            "model_name": self.cfg.model.name,
            "num_classes": self.cfg.model.num_classes,
        }

    def save(self, *, epoch_end: bool) -> None:
        """Checkpoint (a collective: every rank calls it; rank 0 writes). Weights that are not
        finite are never written: the last good checkpoint must survive rotation."""
        step = self.progress.step
        if not weights_finite(self.model, device=self.env.device):
            raise Diverged(f"weights not finite at step {step}; last good: {self.last_good}")
        self._tick()
        ckpt_dir = self.run_dir / "checkpoints"
        # Each rank's own state first (an AAVG learner's replica between averagings) ...
        save_comm_state(self.strategy, ckpt_dir, rank=self.env.rank, step=step)
        with self.strategy.consensus():  # ... then rank 0 writes the model every rank holds.
            # Also the barrier that puts every rank's file before the last.pt that names it.
            rank_counters = all_gather_object(self.counters.as_dict())
            if self.env.is_main:
                self._write(self._state(rank_counters), epoch_end=epoch_end)
        # No rank leaves before the checkpoint is on disk: one restarted at once must find it.
        barrier()
        self.last_good = f"{ckpt_dir / LAST} (step {step})"

    def _write(self, state: dict[str, Any], *, epoch_end: bool) -> None:
        ckpt_dir = self.run_dir / "checkpoints"
        if not epoch_end:
            save_checkpoint(state, ckpt_dir / LAST)
            return
        epoch_file = ckpt_dir / f"epoch_{self.progress.epoch:04d}.pt"
        save_checkpoint(state, epoch_file)
        # The same state: last.pt becomes a second name of the epoch's file, not a second write
        # (for the demo's TSM-R18, 90 MB and an fsync less per epoch).
        atomic_link(epoch_file, ckpt_dir / LAST)
        prune_checkpoints(
            self.run_dir, keep=self.cfg.train.keep_checkpoints, newest=self.progress.epoch
        )

    def _tick(self) -> None:
        now = time.perf_counter()
        self.counters.wall_seconds += now - self._mark
        self._mark = now

    def _stop(self) -> None:
        """Checkpoint where the run is and raise `Preempted` (after the agreement said so)."""
        self.save(epoch_end=False)
        got = self.signals.received
        why = signal.Signals(got).name if got is not None else "a stop signal on another rank"
        raise Preempted(
            f"stopped by {why} at step {self.progress.step}; checkpoint "
            f"{self.run_dir / 'checkpoints' / LAST}; the same command continues the run"
        )

    # -- epochs ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        while self.progress.epoch < self.timeline.epochs:
            train_stats = self.train_epoch()
            done = self.progress.epoch + 1
            val = self.validate() if self._evaluates_after(done) else None
            self.log_epoch(train_stats, val)
            self.progress.epoch += 1
            self.progress.step_in_epoch = 0
            self.totals = EpochTotals()
            if val is not None and self.adaptive.due(epochs_done=done):
                self.adapt_batch(val.top1, epochs_done=done)
            self.save(epoch_end=True)
            if any_rank(self.signals.requested, device=self.env.device):
                self._stop()  # a signal during evaluation: the epoch is saved, stop here
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
        plan = plan_for_batch(self.cfg, self.start_plan, global_batch=self.adaptive.global_batch)
        if plan == self.plan:
            return
        self.plan = plan
        self.timeline = make_timeline(self.cfg, plan)  # the loader follows it from next epoch
        learner = plan.global_batch // self.adaptive.learners
        self.log.write(
            "batch",
            step=self.progress.step,
            epoch=epochs_done,
            global_batch=plan.global_batch,
            learner_batch=learner,
            micro_batch=plan.micro_batch,
            accumulate=plan.accumulate,
            base_lr=plan.base_lr,
        )
        if self.env.is_main:
            print(
                f"vidscale: accuracy {accuracy:.2f} < best {self.adaptive.best:.2f} x "
                f"{self.adaptive.b1:g}: batch per learner -> {learner} (global "
                f"{plan.global_batch}, {plan.micro_batch} x {plan.accumulate} per process)",
                flush=True,
            )

    def train_epoch(self) -> dict[str, float]:
        cfg, p = self.cfg, self.progress
        phase = self.phase_switch.enter(self.timeline.phase_at(p.epoch), log=self.log, step=p.step)
        self.train_data.set_epoch(
            p.epoch, step_in_epoch=p.step_in_epoch, phase=phase, base=cfg.data.train_clip
        )
        batches = iter(self.train_data.loader)
        self.ddp_model.train()
        bar = progress(
            phase.steps_per_epoch,
            enabled=self.env.is_main and cfg.train.progress,
            desc=f"epoch {p.epoch + 1}/{self.timeline.epochs}",
            initial=p.step_in_epoch,
        )
        while p.step_in_epoch < phase.steps_per_epoch:
            result = self.step(batches, phase)
            agreed = result.agreed
            assert agreed is not None
            bar.update(1)
            bar.set_postfix(
                loss=f"{agreed.loss:.3f}",
                lr=f"{result.lr:.3g}",
                clips_s=f"{result.clips / result.seconds:.1f}",
            )
            if agreed.stop:
                bar.close()
                self._stop()
            every = cfg.train.checkpoint_every_steps
            if every and p.step % every == 0:
                self.save(epoch_end=False)
        bar.close()
        del batches
        return self.totals.stats()

    def step(self, batches: Iterator[dict[str, Any]], phase: Phase) -> StepResult:
        """One optimizer step with its bookkeeping: skip it everywhere if it was not finite."""
        cfg, p = self.cfg, self.progress
        t0 = time.perf_counter()
        lr = self.timeline.lr(epoch=p.epoch, step_in_epoch=p.step_in_epoch)
        clips = phase.shape_at(p.step_in_epoch).micro_batch * phase.accumulate
        seed_step(cfg, self.env, p.step)
        self.bn_snapshot.take()
        result = train_step(
            self.ddp_model,
            self.optimizer,
            batches,
            accumulate=phase.accumulate,
            micro_batch=lambda last: self.strategy.micro_batch(last=last),
            clips=clips,
            lr=lr,
            prepare=self.prepare,
            autocast=self.autocast,
            device=self.env.device,
            clip_grad_norm=cfg.optim.clip_grad_norm,
            stop_requested=lambda: self.signals.requested,
            world_size=self.env.world_size,
        )
        dt = result.seconds = time.perf_counter() - t0
        result.clips = clips * self.env.world_size
        agreed = result.agreed
        assert agreed is not None
        p.step += 1
        p.step_in_epoch += 1
        if not agreed.finite:
            self._skip_bad_step(result)
        self.guard.record(step=p.step, finite=agreed.finite, last_good=self.last_good)
        self.totals.add(
            loss=agreed.loss,
            hits=agreed.hits,
            clips=agreed.clips,
            finite=agreed.finite,
            wait=result.wait_s,
            seconds=dt,
        )
        self.counters.add_step(result, seconds=dt, global_batch=result.clips)
        epoch_end = p.step_in_epoch == phase.steps_per_epoch
        self.strategy.after_step(step_in_epoch=p.step_in_epoch, epoch_end=epoch_end)
        self._account(self.strategy.take_traffic())
        if p.step % cfg.train.log_every == 0 and agreed.finite:
            since = self.traffic_since_log
            self.log.write(
                "train",
                step=p.step,
                loss=agreed.loss,
                lr=lr,
                epoch=p.epoch,
                grad_norm=result.grad_norm,
                comm_bytes=since.bytes_sent,  # since the previous train record
                comm_seconds=since.seconds,
                clips_per_second=result.clips / dt,
            )
            self.traffic_since_log = Traffic()
        return result

    def _account(self, traffic: Traffic) -> None:
        """This step's communication into the epoch, the run and the next train record; a
        sparse round (a model averaging) also gets a record of its own."""
        self.totals.add_traffic(traffic)
        self.counters.add_traffic(traffic)
        self.traffic_since_log += traffic
        if traffic.rounds and self.strategy.log_each_round:
            self.log.write(
                "sync",
                step=self.progress.step,
                epoch=self.progress.epoch,
                comm_bytes=traffic.bytes_sent,
                comm_seconds=traffic.seconds,
            )

    def _skip_bad_step(self, result: StepResult) -> None:
        self.bn_snapshot.restore()  # the skipped forward passes must not count either
        step = self.progress.step
        self.counters.bad_steps.append(step)
        self.log.write("bad_step", step=step, epoch=self.progress.epoch, loss=result.loss)
        if self.env.is_main:
            print(f"vidscale: step {step}: loss or gradient not finite; skipped", flush=True)

    def validate(self) -> EvalResult:
        with self.strategy.consensus():  # every rank evaluates the same model
            self._precise_bn()
            result = evaluate(
                Stream(self.model, self.prepare),
                self.val_loader,
                device=self.env.device,
                autocast=self.autocast,
            )
        self.counters.add_skipped(result.skipped)
        self.counters.val_videos = result.count
        self.counters.val_unreadable = [(p, r) for p, r in result.unreadable]
        return result

    def _precise_bn(self) -> None:
        """Multigrid (`multigrid.precise_bn_batches`): BN statistics recomputed over batches of
        the recipe's own clip shape and batch before evaluation (PySlowFast), then pooled over
        ranks so that every rank evaluates the same model."""
        batches = self.cfg.multigrid.precise_bn_batches
        if not (batches and self.cfg.multigrid.enabled):
            return
        loader = self.train_data.base_shape_batches(
            self.progress.epoch, batches=batches, size=self.plan.micro_batch
        )
        device = self.env.device
        inputs = (self.prepare(b["inputs"], device) for b in loader)

        def forward(model: nn.Module, clips: torch.Tensor) -> object:
            with self.autocast():
                return model(clips)

        with self.phase_switch.plain_batchnorm():
            precise_bn(self.model, inputs, num_batches=batches, forward=forward)
            merge_running_statistics(self.model)

    def log_epoch(self, train_stats: dict[str, float], val: EvalResult | None) -> None:
        wait = all_reduce_max(train_stats["data_wait_fraction"])
        values: dict[str, Any] = {**train_stats, "data_wait_fraction": wait}
        values["epoch"] = self.progress.epoch + 1
        p = self.progress
        values["lr"] = self.timeline.lr(epoch=p.epoch, step_in_epoch=p.step_in_epoch)
        if val is not None:
            values.update(val_top1=val.top1, val_top5=val.top5, val_loss=val.loss)
            values["val_count"] = val.count
            values["val_unreadable"] = len(val.unreadable)
            self.counters.add_val(val.top1)
        self.log.write("epoch", step=self.progress.step, **values)
        if self.env.is_main:
            msg = (
                f"epoch {self.progress.epoch + 1}/{self.timeline.epochs}: "
                f"train loss {train_stats['train_loss']:.4f} top1 {train_stats['train_top1']:.1f}"
            )
            if val is not None:
                msg += f" | val top1 {val.top1:.2f} top5 {val.top5:.2f} ({val.count} videos"
                msg += f", {len(val.unreadable)} unreadable)" if val.unreadable else ")"
            msg += f" | {train_stats['epoch_seconds']:.1f}s, data wait {100 * wait:.1f}%"
            print(msg, flush=True)

    def finish(self) -> dict[str, Any]:
        merged = all_gather_object(self.counters.as_dict())
        summary = RunCounters.merge(merged).summary(
            model=self.cfg.model.name,
            world_size=self.env.world_size,
            global_batch=self.plan.global_batch,
            epochs=self.timeline.epochs,
            num_classes=self.cfg.model.num_classes,
            extra={
                "recipe": self.cfg.recipe,
                "base_lr": self.plan.base_lr,
                "strategy": self.cfg.dist.strategy,
                "batch_history": [list(h) for h in self.adaptive.history],
                "fast_path": self.fast.describe(),
                "fast_path_choice": self.fast_choice.record(),
                "host_memory_retained": self.host_memory_retained,
            },
        )
        if self.env.is_main:
            write_summary(summary, self.run_dir / "summary.json")
            plot_run(read_metrics(self.run_dir / "metrics.jsonl"), self.run_dir)
        self.log.close()
        return summary

    def stop_loader_workers(self) -> None:
        """End the loaders' worker processes now. They persist for the run and would otherwise
        live until the loaders are collected: in a process that trains again (a sweep), at an
        unknown moment, possibly while the next run forks its own workers."""
        self.train_data.close()
        stop_workers(self.val_loader)
        del self.train_data, self.val_loader


def train(cfg: RunConfig, *, run_dir: Path, resume: ResumeMode = "auto") -> dict[str, Any]:
    """Train (and evaluate every epoch) as one process or one rank of a torchrun job.

    Continues the run in `run_dir` if it has a checkpoint (`resume`, see `train.resume`).
    Raises `Preempted` after checkpointing on a stop signal, `Diverged` when steps stay
    non-finite.
    """
    env = init_distributed(cfg.train.device, timeout_s=cfg.dist.timeout_s, backend=cfg.dist.backend)
    signals = StopSignals()
    # A rank that fails stops the others in seconds (not at the collective timeout); a stop or
    # a divergence is agreed by all ranks, so it is no failure of one.
    with fail_together(env, expected=(Preempted, Diverged)), signals.installed():
        trainer = Trainer(replace(cfg), run_dir, env, resume=resume, signals=signals)
        try:
            return trainer.run()
        finally:
            trainer.stop_loader_workers()
