"""What a run records of itself: the epoch's totals, the run's counters, its communication,
`metrics.jsonl` and the run's loggers (`metrics.MetricsLog`, `loggers`: TensorBoard, W&B), the
console and the progress bar.

The trainer calls it at named points (a step done, a step skipped, traffic read, an epoch
evaluated, the run finished); every rank calls, rank 0 writes. The totals and counters are
checkpointed (`checkpointer`), so a resumed run reports what an uninterrupted one would.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from vidscale.data.media.decode import usable_cpus
from vidscale.distributed.collectives import all_gather_object, all_reduce_max
from vidscale.distributed.env import DistEnv
from vidscale.distributed.traffic import Traffic
from vidscale.fastpath.probe import FastPathDecision
from vidscale.fastpath.settings import FastPath
from vidscale.run.metrics import MetricsLog, plot_run, progress, read_metrics
from vidscale.run.summary import summary_path
from vidscale.run.timeline import RunSizes
from vidscale.scoring.evaluate import EvalResult
from vidscale.step.run import StepResult
from vidscale.train.phases.adaptive_batch import AdaptiveBatch
from vidscale.train.records.expected_time import duration, expected_training_time
from vidscale.train.records.loggers import LoggerChoice
from vidscale.train.records.summary import EpochTotals, RunCounters


class RunLog:
    """The run's records on this rank. `open` it once the run directory is prepared (a resumed
    run's `metrics.jsonl` trimmed to its start); before that it only counts."""

    def __init__(
        self,
        env: DistEnv,
        *,
        log_every: int,
        show_progress: bool,
        loggers: LoggerChoice | None = None,
    ) -> None:
        """`loggers`: where scalars go besides metrics.jsonl (default: TensorBoard)."""
        self.env = env
        self.log_every = log_every
        self.show_progress = show_progress
        self.loggers = loggers if loggers is not None else LoggerChoice()
        self.totals = EpochTotals()
        self.counters = RunCounters()
        self.traffic_since_record = Traffic()  # goes into the next "train" record
        self.run_dir: Path | None = None
        self._sink = MetricsLog(Path("."), enabled=False)
        self._mark = time.perf_counter()
        self.machine: dict[str, Any] = {}

    def announce_start(
        self, fast: FastPath, choice: FastPathDecision, steps_left: int, accumulate: int
    ) -> None:
        """Rank 0's lines before the first step: processes, the fast path and why, and the time
        the steps still to run are expected to take (`expected_time`)."""
        self.machine = {  # what the summary reports of how the run computed
            "fast_path": fast.describe(),
            "fast_path_choice": choice.record(),
            "cpus": usable_cpus(),
            "threads": torch.get_num_threads(),
        }
        if not self.env.is_main:
            return
        print(f"vidscale: {self.env.world_size} process(es), {fast.describe()}", flush=True)
        print(f"vidscale: fast path: {choice.describe()}", flush=True)
        expected = expected_training_time(choice, steps=steps_left, accumulate=accumulate)
        if expected:
            print(f"vidscale: {expected}", flush=True)

    def open(
        self, run_dir: Path, *, resumed_at: int | None, config: Mapping[str, Any] | None = None
    ) -> None:
        """Start writing to `run_dir` (rank 0) and open the loggers, given `config` (the run's
        resolved config); `resumed_at`: the step a resumed run continues from (TensorBoard
        hides what an earlier attempt wrote after it, W&B continues the same run). The run's
        wall time counts from here."""
        self.run_dir = run_dir
        loggers = []
        if self.env.is_main:
            loggers = self.loggers.open(run_dir, resumed_at=resumed_at, config=config or {})
        self._sink = MetricsLog(run_dir, enabled=self.env.is_main, loggers=loggers)
        self._mark = time.perf_counter()

    def close(self, *, completed: bool) -> None:
        """Finish the loggers; `completed`: the run reached its end. `finish` closes them
        too; a second close does nothing."""
        self._sink.close(completed=completed)

    # The run statistics a checkpoint holds (`state.Held` parts): every rank's counters, and
    # the epoch's running totals, which a carried-over plan change starts afresh.
    def counters_state(self) -> list[dict[str, Any]]:
        """Every rank's counters, rank by rank (a collective: every rank calls it)."""
        return all_gather_object(self.counters.as_dict())

    def load_counters(self, saved: list[dict[str, Any]]) -> None:
        env = self.env
        self.counters = RunCounters.restored(saved, rank=env.rank, world_size=env.world_size)

    def totals_state(self) -> dict[str, Any]:
        return self.totals.as_dict()

    def load_totals(self, saved: dict[str, Any]) -> None:
        self.totals = EpochTotals(**saved)

    def write(self, kind: str, *, step: int, **values: Any) -> None:
        """One record of `kind` in `metrics.jsonl` (and TensorBoard) on rank 0."""
        self._sink.write(kind, step=step, **values)

    def say(self, message: str) -> None:
        if self.env.is_main:
            print(f"vidscale: {message}", flush=True)

    def tick(self) -> None:
        """Add the wall time since the last tick to the run's counters (before a checkpoint)."""
        now = time.perf_counter()
        self.counters.wall_seconds += now - self._mark
        self._mark = now

    def progress_bar(self, total: int, *, desc: str, initial: int) -> tqdm:
        return progress(
            total, enabled=self.env.is_main and self.show_progress, desc=desc, initial=initial
        )

    # -- steps -------------------------------------------------------------------------------
    def skipped_step(self, result: StepResult, *, step: int, epoch: int) -> None:
        """A step not finite on some rank: counted, recorded and said, with what was first not
        finite on rank 0."""
        self.counters.bad_steps.append(step)
        what = result.nonfinite or "something on another rank"
        self.write("bad_step", step=step, epoch=epoch, loss=result.loss, nonfinite=what)
        skipped = len(self.counters.bad_steps)
        self.say(f"step {step}: {what} not finite; skipped ({skipped} skipped so far)")

    def progress_fields(self, result: StepResult) -> dict[str, str]:
        """The progress bar's fields after a step: loss, LR, speed, and the steps skipped so
        far (non-finite: no update applied), once there are any."""
        fields = {
            "loss": f"{result.agreed.loss:.3f}",
            "lr": f"{result.lr:.3g}",
            "clips_s": f"{result.clips / result.seconds:.1f}",
        }
        if self.counters.bad_steps:
            fields["skipped"] = str(len(self.counters.bad_steps))
        return fields

    def step_done(self, result: StepResult) -> None:
        """A step (applied or skipped) into the epoch's totals and the run's counters."""
        agreed = result.agreed
        self.totals.add(
            loss=agreed.loss,
            hits=agreed.hits,
            clips=agreed.clips,
            finite=agreed.finite,
            wait=result.wait_s,
            seconds=result.seconds,
        )
        self.counters.add_step(result, seconds=result.seconds, global_batch=result.clips)

    def traffic(self, traffic: Traffic, *, step: int, epoch: int, own_record: bool) -> None:
        """A step's communication into the epoch, the run and the next train record; with
        `own_record`, a round (a model averaging) also gets a record of its own."""
        self.totals.add_traffic(traffic)
        self.counters.add_traffic(traffic)
        self.traffic_since_record += traffic
        if traffic.rounds and own_record:
            since = {"comm_bytes": traffic.bytes_sent, "comm_seconds": traffic.seconds}
            self.write("sync", step=step, epoch=epoch, **since)

    def train_record(self, result: StepResult, *, step: int, epoch: int) -> None:
        """Every `log_every` steps, a finite step's record."""
        if step % self.log_every or not result.agreed.finite:
            return
        since = self.traffic_since_record
        self.write(
            "train",
            step=step,
            loss=result.agreed.loss,
            lr=result.lr,
            epoch=epoch,
            grad_norm=result.grad_norm,
            comm_bytes=since.bytes_sent,  # since the previous train record
            comm_seconds=since.seconds,
            clips_per_second=result.clips / result.seconds,
        )
        self.traffic_since_record = Traffic()

    def batch_adapted(
        self, sizes: RunSizes, adaptive: AdaptiveBatch, *, accuracy: float, step: int, epoch: int
    ) -> None:
        """The batch size `adaptive` chose after `epoch` epochs (Alg. 1 lines 13-21)."""
        learner = sizes.global_batch // adaptive.learners
        self.write(
            "batch",
            step=step,
            epoch=epoch,
            global_batch=sizes.global_batch,
            learner_batch=learner,
            micro_batch=sizes.micro_batch,
            accumulate=sizes.accumulate,
            base_lr=sizes.base_lr,
        )
        self.say(
            f"accuracy {accuracy:.2f} < best {adaptive.best:.2f} x {adaptive.b1:g}: batch per "
            f"learner -> {learner} (global {sizes.global_batch}, {sizes.micro_batch} x "
            f"{sizes.accumulate} per process)"
        )

    # -- epochs ------------------------------------------------------------------------------
    def evaluated(self, result: EvalResult) -> None:
        """An evaluation's unreadable and skipped videos into the run's counters."""
        self.counters.add_skipped(result.skipped)
        self.counters.val_videos = result.count
        self.counters.val_unreadable = [(p, r) for p, r in result.unreadable]

    def epoch_done(
        self, val: EvalResult | None, *, step: int, epochs_done: int, epochs: int, lr: float
    ) -> None:
        """The epoch's record and console line (a collective: the data wait is the slowest
        rank's); its totals start afresh."""
        stats = self.totals.stats()
        wait = all_reduce_max(stats["data_wait_fraction"])
        values: dict[str, Any] = {**stats, "data_wait_fraction": wait}
        values["epoch"] = epochs_done
        values["lr"] = lr
        if val is not None:
            values.update(val_top1=val.top1, val_top5=val.top5, val_loss=val.loss)
            values["val_count"] = val.count
            values["val_unreadable"] = len(val.unreadable)
            if val.map is not None:
                values.update(val_map=val.map, val_map_chance=val.map_chance)
            self.counters.add_val(val.top1, mean_ap=val.map, chance=val.map_chance)
        self.write("epoch", step=step, **values)
        if self.env.is_main:
            msg = (
                f"epoch {epochs_done}/{epochs}: "
                f"train loss {stats['train_loss']:.4f} top1 {stats['train_top1']:.1f}"
            )
            if val is not None:
                msg += f" | {validation_line(val)}"
            if stats["skipped_steps"]:
                msg += f" | {stats['skipped_steps']:.0f} steps skipped (not finite)"
            msg += f" | {stats['epoch_seconds']:.1f}s, data wait {100 * wait:.1f}%"
            if epochs_done < epochs:  # at this epoch's pace
                msg += f", about {duration((epochs - epochs_done) * stats['epoch_seconds'])} left"
            print(msg, flush=True)
        self.totals = EpochTotals()

    def finish(self, **fields: Any) -> dict[str, Any]:
        """The run's summary from every rank's counters (a collective) with `fields` (model,
        world_size, global_batch, epochs, num_classes, extra), as `summary.json` holds it
        (`RunSummary.record()`); rank 0 writes the file and the plots, with the fast path and
        CPUs it announced at start. Closes the log."""
        fields["extra"] = {**fields.get("extra", {}), **self.machine}
        summary = RunCounters.merge(self.counters_state()).summary(**fields)
        if self.env.is_main and self.run_dir is not None:
            summary.write(summary_path(self.run_dir))
            plot_run(read_metrics(self.run_dir / "metrics.jsonl"), self.run_dir)
        self.close(completed=True)
        return summary.record()


def validation_line(val: EvalResult) -> str:
    """The epoch line's evaluation: top-1/top-5, or for multi-label data the mAP and its chance
    level first (top-1 there is hit@1); the videos counted and any left out."""
    if val.map is None:
        line = f"val top1 {val.top1:.2f} top5 {val.top5:.2f}"
    else:
        line = f"val mAP {val.map:.2f} (chance {val.map_chance:.2f}) hit@1 {val.top1:.1f}"
    line += f" ({val.count} videos"
    return line + (f", {len(val.unreadable)} unreadable)" if val.unreadable else ")")
