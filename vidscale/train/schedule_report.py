"""`vidscale schedule`: what a recipe's run does epoch by epoch, before it runs.

The per-epoch table has the columns of PySlowFast's multigrid schedule (epoch, frames, crop,
global and per-device batch, LR at the epoch's first step, BN mode and splits, largest temporal
stride, short-cycle crops and batches, evaluation and BN-change flags), for multigrid and plain
runs alike; below it, the run's phases as this machine would train them (steps per epoch, clips
per micro-batch, accumulation) and, for multigrid, the theoretical savings against the same
recipe without it (Wu et al. §4: iterations, and FLOPs counted as clips x frames x crop^2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from vidscale.config import RunConfig
from vidscale.run.timeline import Timeline, make_timeline, run_sizes
from vidscale.schedules.multigrid_table import format_table, write_csv


@dataclass(frozen=True)
class ScheduleReport:
    timeline: Timeline
    rows: list[dict[str, object]]
    savings: dict[str, float]  # empty for a plain run

    def text(self) -> str:
        lines = [format_table(self.rows), "", "phases on this machine:"]
        lines.append(
            f"{'epochs':>11s} {'steps/ep':>8s} {'steps':>8s} {'accum':>5s} {'batch':>6s} "
            f"{'LR x':>6s}  {'bn':16s} clips per micro-batch (frames x crop^2 x clips)"
        )
        for p in self.timeline.phases:
            cycle = ", ".join(f"{s.frames}x{s.crop}^2x{s.micro_batch}" for s in p.shapes)
            span = f"{p.first_epoch + 1}-{p.end_epoch}"
            bn = p.bn_mode if p.bn_splits == 1 else f"{p.bn_mode}/{p.bn_splits}"
            lines.append(
                f"{span:>11s} {p.steps_per_epoch:8d} {p.epochs * p.steps_per_epoch:8d} "
                f"{p.accumulate:5d} {p.global_batch:6d} {p.lr_factor:6.3g}  {bn:16s} {cycle}"
            )
        lines.append(f"{self.timeline.epochs} epochs, {self.timeline.total_steps:,} steps")
        if self.savings:
            s = self.savings
            lines.append(
                f"theoretical saving vs the same recipe without multigrid: "
                f"{s['iterations']:.2f}x fewer iterations, {s['flops']:.2f}x fewer FLOPs "
                f"(long cycle only {s['long_only_iterations']:.2f}x, short cycle only "
                f"{s['short_only_iterations']:.2f}x iterations); steps here "
                f"{s['steps_plain']:,.0f} -> {s['steps']:,.0f}"
            )
        return "\n".join(lines)

    def write_csv(self, path: Path) -> None:
        write_csv(self.rows, path)


def schedule_report(cfg: RunConfig, *, world_size: int, train_size: int) -> ScheduleReport:
    """The schedule of `cfg` on `world_size` processes and `train_size` training videos."""
    sizes = run_sizes(cfg, world_size=world_size, train_size=train_size)
    timeline = make_timeline(cfg, sizes)
    if timeline.multigrid is None:
        return ScheduleReport(timeline, _plain_rows(cfg, timeline), {})
    schedule = timeline.multigrid
    mg = cfg.multigrid

    def only(long: bool, short: bool) -> float:
        variant = replace(cfg, multigrid=replace(mg, long_cycle=long, short_cycle=short))
        other = make_timeline(variant, sizes).multigrid
        assert other is not None
        return other.iteration_saving()

    savings = {
        "iterations": schedule.iteration_saving(),
        "flops": schedule.flop_saving(),
        "long_only_iterations": only(True, False),
        "short_only_iterations": only(False, True),
        "steps": float(timeline.total_steps),
        "steps_plain": float(sizes.total_steps),
    }
    return ScheduleReport(timeline, schedule.rows(), savings)


def _plain_rows(cfg: RunConfig, timeline: Timeline) -> list[dict[str, object]]:
    (phase,) = timeline.phases
    shape = phase.shapes[0]
    clip = cfg.data.train_clip
    every = cfg.train.eval_every
    return [
        {
            "epoch": epoch,
            "T_fast": shape.frames,
            "S": shape.crop,
            "B_global": phase.global_batch,
            "B_per_gpu": shape.micro_batch,
            "lr": timeline.lr(epoch=epoch, step_in_epoch=0),
            "bn_norm_type": "batchnorm",
            "bn_num_splits": 1,
            "max_sampling_rate": clip.stride if clip.sampling == "dense" else 1,
            "short_cycle_crops": str(shape.crop),
            "short_cycle_per_gpu_bs": str(shape.micro_batch),
            "ckpt_eval_preciseBN": int(timeline.evaluates_after(epoch + 1, every=every)),
            "rebuild_model_before_epoch": 0,
        }
        for epoch in range(timeline.epochs)
    ]
