"""`bench network`'s result: the links as measured, one row per (rate, model, variant) with the
measured two-node step next to the planner's prediction, the table and the plot (Fig. 3c of
the TSM paper in miniature: scaling efficiency against link rate, a line per model and
variant)."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vidscale.bench.network.config import NetworkConfig
from vidscale.bench.results import plain
from vidscale.bench.scaling.result import ScalingResult, ScalingRun
from vidscale.errors import InputError
from vidscale.fastpath.hardware import describe
from vidscale.models.costs import ModelCosts, model_costs
from vidscale.planner.link_model import LinkPrediction, LinkVariant, predict_step


@dataclass(frozen=True)
class LinkMeasurement:
    """One rate's link: the `tc` rate (None: unshaped), one TCP stream's throughput, and gloo's
    all-reduce across it (`distributed.peers.link_probe`): a small one's time (`latency_s`, the
    per-message cost) and the bandwidth of large ones (`allreduce_bytes_per_s`, bytes each node
    sends per second)."""

    rate: str
    shaped_bits_per_s: float | None
    tcp_bits_per_s: float
    latency_s: float
    allreduce_bytes_per_s: float

    @property
    def bytes_per_s(self) -> float:
        """The rate the planner is given: gloo's all-reduce bandwidth across the link (below the
        `tc` rate by the headers the shaper counts; on an unshaped veth, bound by the one core
        that copies and reduces)."""
        return self.allreduce_bytes_per_s

    def describe(self) -> str:
        return (
            f"{self.rate}: TCP stream {self.tcp_bits_per_s / 1e6:.0f} Mbit/s; gloo all-reduce "
            f"{self.allreduce_bytes_per_s * 8 / 1e6:.0f} Mbit/s, {self.latency_s * 1e3:.2f} ms "
            "per small one"
        )


@dataclass(frozen=True)
class NetworkRow:
    """One two-node run (measured) and the planner's step for it (predicted)."""

    rate: str
    model: str
    variant: str
    strategy: str
    hook: str
    k: int
    link_bytes_per_s: float
    one_process_step_s: float
    step_s: float
    compute_s: float
    comm_exposed_s: float
    data_wait_s: float
    efficiency: float | None
    comm_bytes_per_step: float
    predicted_step_s: float
    predicted_bytes_per_step: float
    # The CPU time a step of the training thread and of the whole rank process (its gloo
    # threads too, during the exposed communication as well); None in results measured before
    # they were recorded. A rank has its node's one core: what the step holds beyond
    # `process_cpu_s`, that core spent outside the process (the kernel's packet work, the
    # node's agent) or idle.
    thread_cpu_s: float | None = None
    process_cpu_s: float | None = None

    @property
    def error(self) -> float:
        """The prediction's relative error: predicted / measured - 1."""
        return self.predicted_step_s / self.step_s - 1.0

    @property
    def predicted_efficiency(self) -> float:
        return self.one_process_step_s / self.predicted_step_s


@dataclass(frozen=True)
class NetworkResult:
    settings: NetworkConfig
    host: dict[str, Any]
    links: list[LinkMeasurement]
    one_process: dict[str, float]  # model -> its one-process step (s)
    hook_compute: dict[str, dict[str, float]]  # model -> hook -> its compute per step (s)
    rows: list[NetworkRow]
    # model -> the one-process steps of two processes computing at once, one a core (s); {}
    # in results measured before they were
    co_running: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    # model -> its compute per step on two nodes in lockstep with almost nothing to send (s);
    # {} in results measured before it was
    lockstep: dict[str, float] = dataclasses.field(default_factory=dict)

    def co_running_step(self) -> dict[str, float]:
        """Each model's step with a second process beside it: the slower process's, as a
        synchronous two-node step waits for the slower node."""
        return {model: max(steps) for model, steps in self.co_running.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "benchmark": "network",
            "settings": plain(dataclasses.asdict(self.settings)),
            "host": self.host,
            "links": [dataclasses.asdict(link) for link in self.links],
            "one_process_step_s": self.one_process,
            "hook_compute_s": self.hook_compute,
            "co_running_steps_s": self.co_running,
            "co_running_step_s": self.co_running_step(),
            "lockstep_step_s": self.lockstep,
            "rows": [
                {
                    **dataclasses.asdict(r),
                    "error": r.error,
                    "predicted_efficiency": r.predicted_efficiency,
                }
                for r in self.rows
            ],
        }


@cache
def _model_facts(
    name: str, frames: int, size: int, classes: int
) -> tuple[ModelCosts, tuple[tuple[int, ...], ...], float, float]:
    """The model's layer costs, gradient shapes, AAVG's averaged bytes (parameters, SGD's
    momentum, BatchNorm's mean and variance, fp32) and DDP's broadcast buffer bytes."""
    from vidscale.models.registry import ModelConfig, build_model

    costs = model_costs(name, frames=frames, size=size, num_classes=classes)
    with torch.device("meta"):
        model = build_model(ModelConfig(name=name, num_classes=classes, frames=frames))
    shapes = tuple(tuple(p.shape) for p in model.parameters() if p.requires_grad)
    params = sum(math.prod(s) for s in shapes)
    stats = 0
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            stats += 2 * m.running_mean.numel()  # the mean and the variance
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return costs, shapes, 4.0 * (2 * params + stats), float(buffers)


def predict_for(
    cfg: NetworkConfig,
    model: str,
    variant: LinkVariant,
    link: LinkMeasurement,
    *,
    one_process_s: float,
    hook_compute: dict[str, float],
    cpu_s_per_byte: float,
) -> LinkPrediction:
    """The planner's two-node step of `model` with `variant` across `link` (see `measure`)."""
    costs, shapes, averaged, buffers = _model_facts(model, cfg.frames, cfg.size, cfg.num_classes)
    ddp = variant.strategy == "ddp"
    return predict_step(
        costs,
        variant,
        one_process_s=one_process_s,
        procs=2,
        link_bytes_per_s=link.bytes_per_s,
        bucket_mb=cfg.bucket_cap_mb,
        averaged_bytes=averaged,
        param_shapes=list(shapes),
        per_step_bytes=buffers if ddp else 0.0,
        per_step_messages=2 if ddp else 1,
        message_s=link.latency_s,
        hook_compute_s=hook_compute.get(variant.hook, 0.0) if ddp else 0.0,
        cpu_s_per_byte=cpu_s_per_byte,
    )


def cpu_s_per_byte(links: list[LinkMeasurement]) -> float:
    """The core time gloo spends per byte all-reduced: the inverse of the all-reduce bandwidth
    on the unshaped link, where one core per node, not the link, bounds it (0 without one)."""
    unshaped = [link for link in links if link.shaped_bits_per_s is None]
    return 1.0 / unshaped[0].allreduce_bytes_per_s if unshaped else 0.0


def build(
    cfg: NetworkConfig,
    baseline: ScalingResult,
    measured: list[tuple[LinkMeasurement, list[ScalingRun]]],
    hook_compute: dict[str, dict[str, float]],
    *,
    co_running: dict[str, list[float]] | None = None,
    lockstep: dict[str, float] | None = None,
) -> NetworkResult:
    """Every measured two-node run with its prediction (see `measure`); `hook_compute`: each
    model's hooks' compute per step on one process (`hook_cost`); `co_running`: each model's
    one-process steps of two processes computing at once (`measure._co_running`); `lockstep`:
    each model's compute per step on two nodes in step (`measure._lockstep`)."""
    alone = {r.model: r.step_s for r in baseline.runs if r.procs == 1}
    cpu = cpu_s_per_byte([link for link, _ in measured])
    rows = []
    for link, runs in measured:
        for run in runs:
            variant = LinkVariant(strategy=run.strategy, hook=run.hook, k=run.k)
            predicted = predict_for(
                cfg,
                run.model,
                variant,
                link,
                one_process_s=alone[run.model],
                hook_compute=hook_compute.get(run.model, {}),
                cpu_s_per_byte=cpu,
            )
            rows.append(
                NetworkRow(
                    rate=link.rate,
                    model=run.model,
                    variant=run.variant,
                    strategy=run.strategy,
                    hook=run.hook,
                    k=run.k,
                    link_bytes_per_s=link.bytes_per_s,
                    one_process_step_s=alone[run.model],
                    step_s=run.step_s,
                    compute_s=run.compute_s,
                    comm_exposed_s=run.comm_exposed_s,
                    data_wait_s=run.data_wait_s,
                    efficiency=run.efficiency,
                    comm_bytes_per_step=run.comm_bytes_per_step,
                    predicted_step_s=predicted.step_s,
                    predicted_bytes_per_step=predicted.bytes_per_step,
                    thread_cpu_s=run.thread_cpu_s,
                    process_cpu_s=run.process_cpu_s,
                )
            )
    links = [link for link, _ in measured]
    host = describe(torch.device("cpu"))
    return NetworkResult(
        cfg, host, links, alone, hook_compute, rows, co_running or {}, lockstep or {}
    )


def replan(result: NetworkResult, *, compute: str = "one_process") -> NetworkResult:
    """`result` with every row's prediction made again by the planner as it is now (its
    measurements kept): how a change to the model moves the errors, without measuring again.
    `compute`: the step the planner starts from, one process alone (as for a cluster, whose
    nodes have memory of their own) or two nodes in lockstep on this machine (`lockstep`, as
    the two-node rows computed: the same model, given the compute those rows had).
    `InputError` for a result without the lockstep compute."""
    if compute == "lockstep" and not all(r.model in result.lockstep for r in result.rows):
        raise InputError(
            "--replan-compute: lockstep: the result has no lockstep compute of every model "
            "(bench network records lockstep_step_s since it measures it)"
        )
    links = {link.rate: link for link in result.links}
    cpu = cpu_s_per_byte(result.links)
    rows = []
    for row in result.rows:
        start = result.lockstep[row.model] if compute == "lockstep" else row.one_process_step_s
        predicted = predict_for(
            result.settings,
            row.model,
            LinkVariant(strategy=row.strategy, hook=row.hook, k=row.k),
            links[row.rate],
            one_process_s=start,
            hook_compute=result.hook_compute.get(row.model, {}),
            cpu_s_per_byte=cpu,
        )
        rows.append(
            dataclasses.replace(
                row,
                predicted_step_s=predicted.step_s,
                predicted_bytes_per_step=predicted.bytes_per_step,
            )
        )
    return dataclasses.replace(result, rows=rows)


def _variant_fields(label: str) -> dict[str, Any]:
    """strategy, hook and k from a row's variant label ("ddp+bf16", "aavg k=4"), for rows
    written before they were recorded apart."""
    strategy, _, rest = label.partition(" k=")
    if rest:
        return {"strategy": strategy, "hook": "none", "k": int(rest)}
    strategy, _, hook = label.partition("+")
    return {"strategy": strategy, "hook": hook or "none", "k": 0}


def read_result(path: Path) -> NetworkResult:
    """A `bench network` JSON read back; `InputError` naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
        settings = dict(data["settings"])
        for key in ("rates", "models", "hooks"):
            settings[key] = tuple(settings[key])
        measured = {f.name for f in dataclasses.fields(NetworkRow)}
        return NetworkResult(
            settings=NetworkConfig(**settings),
            host=data["host"],
            links=[LinkMeasurement(**link) for link in data["links"]],
            one_process=data["one_process_step_s"],
            hook_compute=data["hook_compute_s"],
            rows=[
                NetworkRow(**_variant_fields(r["variant"]) | {k: r[k] for k in r if k in measured})
                for r in data["rows"]
            ],
            co_running=data.get("co_running_steps_s", {}),
            lockstep=data.get("lockstep_step_s", {}),
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not a `vidscale bench network` result ({err})") from None


def format_table(result: NetworkResult) -> str:
    """One line per row: rate, model, variant, measured step and its split (compute, of it the
    training thread's CPU time and the process's other threads', exposed communication),
    efficiency, predicted step and the error."""
    head = (
        f"{'link':>9} {'model':<20} {'variant':<14} {'step s':>7} {'compute':>7} "
        f"{'thread':>7} {'others':>7} {'comm':>7} {'eff':>5} {'MB/step':>8} {'pred s':>7} "
        f"{'error':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in result.rows:
        eff = "-" if r.efficiency is None else f"{r.efficiency:.2f}"
        thread = "-" if r.thread_cpu_s is None else f"{r.thread_cpu_s:.3f}"
        others = (
            "-"
            if r.thread_cpu_s is None or r.process_cpu_s is None
            else f"{r.process_cpu_s - r.thread_cpu_s:.3f}"
        )
        lines.append(
            f"{r.rate:>9} {r.model:<20} {r.variant:<14} {r.step_s:7.3f} {r.compute_s:7.3f} "
            f"{thread:>7} {others:>7} {r.comm_exposed_s:7.3f} {eff:>5} "
            f"{r.comm_bytes_per_step / 1e6:8.1f} {r.predicted_step_s:7.3f} {r.error:+7.1%}"
        )
    worst = max((abs(r.error) for r in result.rows), default=0.0)
    lines.append(f"largest planner error: {worst:.1%} over {len(result.rows)} rows")
    for model, steps in result.co_running.items():
        alone = result.one_process[model]
        each = " and ".join(f"{step:.3f}" for step in steps)
        lines.append(
            f"{model}: one process {alone:.3f} s a step alone; two at once {each} s "
            f"(the slower {max(steps) / alone - 1:+.1%})"
        )
    for model, compute in result.lockstep.items():
        alone = result.one_process[model]
        lines.append(
            f"{model}: two nodes in lockstep, nothing to send: {compute:.3f} s of compute a step "
            f"({compute / alone - 1:+.1%} over one process alone)"
        )
    return "\n".join(lines)


def plot_network(result: NetworkResult, path: Path) -> None:
    """Scaling efficiency (two nodes over one) against link rate, a panel per model and a line
    per variant, measured solid and predicted dashed (TSM paper Fig. 3c in miniature)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = {link.rate: link.bytes_per_s * 8 / 1e9 for link in result.links}
    models = list(dict.fromkeys(r.model for r in result.rows))
    variants = list(dict.fromkeys(r.variant for r in result.rows))
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 4.4), dpi=110, sharey=True)
    axes = axes if len(models) > 1 else [axes]
    for ax, model in zip(axes, models, strict=True):
        for index, variant in enumerate(variants):
            mine = sorted(
                (r for r in result.rows if (r.model, r.variant) == (model, variant)),
                key=lambda r: rates[r.rate],
            )
            xs = [rates[r.rate] for r in mine]
            color = f"C{index % 10}"
            ax.plot(xs, [r.efficiency or 0.0 for r in mine], "o-", color=color, label=variant)
            ax.plot(xs, [r.predicted_efficiency for r in mine], "--", color=color, alpha=0.6)
        ax.set_xscale("log")
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("gloo all-reduce rate across the link (Gbit/s)", fontsize=8)
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("scaling efficiency, 2 nodes")
    axes[0].legend(fontsize=7)
    s = result.settings
    fig.suptitle(
        f"Two nodes over a shaped link (TSM paper Fig. 3c in miniature): {s.batch} clips of "
        f"{s.frames}x{s.size}² per process, 1 core per node; solid measured, dashed planner",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
