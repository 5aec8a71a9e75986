"""`bench scaling`'s numbers: per-run summaries, speed-up and scaling efficiency, the table and
the plot of training speed against processes (TSM paper §4, Fig. 6).

A run's step time is the mean over its measured steps and ranks; its parts (compute, exposed
data wait, exposed communication) are means over the same steps, so they add up to it exactly.
The ranks run in lock step (every step ends in a collective), so the mean step is the time the
group takes per step, and the speed is `procs x batch / step`. Speed-up is that over the
one-process speed of the same model; efficiency is speed-up / procs, the paper's "actual
training speed divided by the ideal training speed (single machine training speed x number of
nodes)", with the batch per process held constant.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from vidscale.bench.results import HostInfo
from vidscale.bench.scaling.config import ScalingConfig
from vidscale.bench.scaling.result import RankSteps, ScalingResult, ScalingRun, Spread
from vidscale.fastpath.hardware import describe, resolve_device

# The measured series of each rank, per step; `compute_s` is derived from them.
SERIES = (
    "step_s",
    "data_wait_s",
    "comm_exposed_s",
    "forward_sync_s",
    "comm_in_flight_s",
    "comm_bytes",
    "comm_rounds",
    "thread_cpu_s",
)


def _spread(values: list[float]) -> dict[str, float]:
    """Median, 10th and 90th percentiles, standard deviation, min and max of `values`."""
    deciles = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else None
    return {
        "median": statistics.median(values),
        "p10": deciles[0] if deciles else values[0],
        "p90": deciles[-1] if deciles else values[0],
        "std": statistics.pstdev(values),
        "min": min(values),
        "max": max(values),
    }


def _with_compute(rank: dict[str, Any]) -> dict[str, Any]:
    """A rank's series with `compute_s` per step: the step less its exposed data wait and
    exposed communication."""
    compute = [
        step - data - comm
        for step, data, comm in zip(
            rank["step_s"], rank["data_wait_s"], rank["comm_exposed_s"], strict=True
        )
    ]
    optional = {k: rank[k] for k in RankSteps.OPTIONAL if rank.get(k)}  # absent in older runs
    return {"rank": rank["rank"], **{k: rank[k] for k in SERIES}, **optional, "compute_s": compute}


def summarise(measurement: dict[str, Any], *, batch: int, single: float | None) -> ScalingRun:
    """One run's row: its identity, means over steps and ranks, the step time's spread, the
    speed, and (given the one-process speed `single`) speed-up and efficiency."""
    ranks = [_with_compute(r) for r in measurement["ranks"]]

    def mean(key: str) -> float:
        return statistics.fmean(x for r in ranks for x in r[key])

    def optional_mean(key: str) -> float | None:
        return mean(key) if all(key in r for r in ranks) else None

    procs = int(measurement["procs"])
    step = mean("step_s")
    clips_per_s = procs * batch / step
    speedup = clips_per_s / single if single else None
    identity = ("model", "variant", "strategy", "hook", "k", "procs", "device", "fast_path")
    load = measurement.get("load_average", [None, None])
    return ScalingRun(
        **{k: measurement[k] for k in identity},
        params=measurement["params"],
        grad_bytes=measurement["grad_bytes"],
        batch_per_process=batch,
        global_batch=procs * batch,
        steps=len(ranks[0]["step_s"]),
        clips_per_s=clips_per_s,
        ideal_clips_per_s=procs * single if single else None,
        speedup=speedup,
        efficiency=speedup / procs if speedup is not None else None,
        step_s=step,
        step_spread_s=Spread(**_spread([x for r in ranks for x in r["step_s"]])),
        compute_s=mean("compute_s"),
        data_wait_s=mean("data_wait_s"),
        comm_exposed_s=mean("comm_exposed_s"),
        forward_sync_s=mean("forward_sync_s"),
        comm_in_flight_s=mean("comm_in_flight_s"),
        comm_bytes_per_step=mean("comm_bytes"),
        comm_rounds_per_step=mean("comm_rounds"),
        thread_cpu_s=mean("thread_cpu_s"),
        process_cpu_s=optional_mean("process_cpu_s"),
        load_average=tuple(load),  # rank 0's host, before and after: above the cores = contention
        ranks=tuple(_rank_steps(r) for r in ranks),
        applied_steps=measurement.get("applied_steps"),
    )


def _rank_steps(rank: dict[str, Any]) -> RankSteps:
    optional = {k: tuple(rank[k]) for k in RankSteps.OPTIONAL if k in rank}
    return RankSteps(rank=rank["rank"], **{k: tuple(rank[k]) for k in RankSteps.SERIES}, **optional)


DEFINITIONS = {
    "clips_per_s": "procs x batch_per_process / step_s",
    "speedup": "clips_per_s / clips_per_s of 1 process (same model)",
    "efficiency": "clips_per_s / (procs x clips_per_s of 1 process)",
    "step_s": "mean over measured steps and ranks; spread in step_spread_s",
    "compute_s": "step_s - data_wait_s - comm_exposed_s",
    "data_wait_s": "time blocked in next(loader)",
    "comm_exposed_s": "collectives the step waited for: DDP gradient hooks + wait from "
    "the last bucket's readiness to the last all-reduce's end + forward buffer "
    "broadcast (forward_sync_s); AAVG: the averaging",
    "comm_in_flight_s": "time with a collective in flight, overlapped or not",
    "comm_bytes_per_step": "bytes this rank put into collectives per step",
    "applied_steps": "measured steps that applied their update (finite on every rank); a "
    "row with none is refused, not recorded",
    "thread_cpu_s": "CPU time of the training thread; cpu% in the table is it over "
    "compute_s: well below 100, the compute waited for a core or the slowest rank",
    "process_cpu_s": "CPU time of the whole rank process (its training thread and gloo's "
    "threads); null in rows measured before it was recorded",
}


def build_report(cfg: ScalingConfig, measurements: list[dict[str, Any]]) -> ScalingResult:
    """The report: settings, host, definitions and one row per (model, variant, procs),
    each model's one-process run first."""
    single: dict[str, float] = {}
    for m in measurements:
        if m["procs"] == 1 and m["model"] not in single:
            single[m["model"]] = summarise(m, batch=cfg.batch, single=None).clips_per_s
    rows = [summarise(m, batch=cfg.batch, single=single.get(m["model"])) for m in measurements]
    order = {name: i for i, name in enumerate(cfg.models)}
    rows.sort(key=lambda r: (order.get(r.model, len(order)), r.procs))
    host = describe(resolve_device(cfg.device)) | {"torch_threads": cfg.threads}
    return ScalingResult(
        reference="TSM paper (Lin et al., 'Training Kinetics in 15 Minutes') §3c, §4, Fig. 6",
        settings=cfg,
        host=HostInfo.of(host),
        data="random uint8 clips held in memory (no decoding)",
        definitions=DEFINITIONS,
        runs=tuple(rows),
    )


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _cpu_share(row: ScalingRun) -> float | None:
    return 100 * row.thread_cpu_s / row.compute_s if row.compute_s > 0 else None


def format_table(report: ScalingResult) -> str:
    """The report as a text table: one line per run, times in ms per step."""
    s = report.settings
    head = (
        f"bench scaling: {s.frames} frames x {s.size}², batch {s.batch} per process, "
        f"{s.threads} thread(s) per process, {s.device}, {s.steps} steps after "
        f"{s.warmup} warm-up (times: ms per step, mean over steps and ranks); data: "
        + (
            f"{s.data} ({s.source}, {s.workers} loader worker(s) per process)"
            if s.data
            else "random clips in memory"
        )
    )
    columns = (
        f"{'model':<20} {'variant':<14} {'procs':>5} {'clips/s':>8} {'speed-up':>8} "
        f"{'effic.':>7} {'step':>8} {'p10-p90':>13} {'compute':>8} {'data':>6} "
        f"{'comm exp':>8} {'in flight':>9} {'MB/step':>8} {'cpu%':>5}"
    )
    lines = [head, columns, "-" * len(columns)]
    for r in report.runs:
        spread = r.step_spread_s
        lines.append(
            f"{r.model:<20} {r.variant:<14} {r.procs:>5} {r.clips_per_s:>8.2f} "
            f"{_number(r.speedup, '8.2f'):>8} "
            f"{_number(None if r.efficiency is None else 100 * r.efficiency, '6.1f'):>6}% "
            f"{1e3 * r.step_s:>8.1f} "
            f"{1e3 * spread.p10:>6.0f}-{1e3 * spread.p90:<6.0f} "
            f"{1e3 * r.compute_s:>8.1f} {1e3 * r.data_wait_s:>6.1f} "
            f"{1e3 * r.comm_exposed_s:>8.1f} {1e3 * r.comm_in_flight_s:>9.1f} "
            f"{r.comm_bytes_per_step / 1e6:>8.1f} "
            f"{_number(_cpu_share(r), '5.0f'):>5}"
        )
    return "\n".join(lines)


def plot_scaling(report: ScalingResult, path: Path) -> None:
    """Fig. 6 of the paper for these runs: clips/s against processes, one panel per model,
    the ideal (one process x P) dashed, each variant a line, its efficiency written beside
    each point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = report.models
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.2), dpi=110)
    axes = axes if len(models) > 1 else [axes]
    for ax, model in zip(axes, models, strict=True):
        _plot_model(ax, report.runs_of(model), model)
    s = report.settings
    fig.suptitle(
        f"Training speed vs processes (TSM paper Fig. 6)\n{s.batch} clips of "
        f"{s.frames}x{s.size}² per process, {s.device}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _plot_model(ax: Any, runs: list[ScalingRun], model: str) -> None:
    single = next((r for r in runs if r.procs == 1), None)
    procs = sorted({r.procs for r in runs})
    if single is not None:
        rate = single.clips_per_s
        ax.plot(procs, [p * rate for p in procs], "k--", label="ideal (1 process x P)")
    colors: dict[str, str] = {}
    for variant in dict.fromkeys(r.variant for r in runs if r.procs > 1):
        points = sorted((r for r in runs if r.variant == variant), key=lambda r: r.procs)
        line = ([single] if single is not None else []) + points
        (drawn,) = ax.plot(
            [r.procs for r in line], [r.clips_per_s for r in line], "o-", label=variant
        )
        colors[variant] = drawn.get_color()
    for p in procs[1:] if single is not None else []:
        # Efficiencies to the right of their points, fastest first, one line apart: points of
        # several variants at one P are often too close to label each in place.
        at_p = sorted((r for r in runs if r.procs == p), key=lambda r: -r.clips_per_s)
        for i, r in enumerate(at_p):
            ax.annotate(
                f"{100 * (r.efficiency or 0.0):.0f}%",
                (p, r.clips_per_s),
                textcoords="offset points",
                xytext=(8, 4 - 11 * i),
                fontsize=8,
                color=colors.get(r.variant, "k"),
            )
    if procs and max(procs) >= 4:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.margins(x=0.2)
    ax.set_xticks(procs, [str(p) for p in procs])
    ax.set_title(model)
    ax.set_xlabel("processes")
    ax.set_ylabel("clips/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
