"""`bench cluster`'s result: the probed links, one row per (rate, nodes, model, variant) with
the measured step (the stand-in ranks') next to the planner's (`planner.cluster_model`), the
table and the plot (efficiency against nodes, a panel per rate: Table 3's and Fig. 3c's shapes
in miniature)."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from vidscale.bench.cluster.config import ClipShape, ClusterConfig, once_an_epoch
from vidscale.bench.cluster.layer_times import BackwardTiming
from vidscale.bench.network.report import _model_facts
from vidscale.errors import InputError
from vidscale.fastpath.hardware import describe, load_average
from vidscale.planner.cluster_model import ClusterLink, predict_cluster_step
from vidscale.planner.link_model import BACKWARD_FRACTION, LinkVariant


@dataclass(frozen=True)
class ProbedLink:
    """A two-node cluster's link at `rate` (`tc`'s bits per second, None unshaped) as gloo's
    all-reduce saw it: a small one's seconds and large ones' bytes per second each way."""

    rate: str
    shaped_bits_per_s: float | None
    latency_s: float
    bytes_per_s: float
    run: int = 0  # which of the combined runs probed it (`combine`)


@dataclass(frozen=True)
class ClusterRow:
    """One measured (rate, nodes, model, variant) and the planner's step for it."""

    rate: str
    nodes: int
    model: str
    variant: str
    strategy: str
    hook: str
    k: int
    slow_link: str | None
    slow_factor: float
    step_s: float
    comm_exposed_s: float
    comm_bytes_per_step: float
    stretched_s: float
    one_process_step_s: float
    efficiency: float
    predicted_step_s: float
    error: float
    run: int = 0  # which of the combined runs measured it: its links are that run's probes
    cpu_s: float = 0.0  # CPU seconds a rank's process used a step (0: not recorded)
    trunk: str | None = None  # two racks joined by a trunk of this rate; None: one switch
    trunk_hops: int = 0  # hops of the ring across the trunk in its busier direction

    @property
    def in_sweep(self) -> bool:
        """A row of the sweep: one switch, no straggler."""
        return not self.slow_link and self.slow_factor == 1 and not self.trunk

    @property
    def pass_name(self) -> str:
        """The pass that measured this row, as `settings["failed"]` names a failed pass."""
        if self.trunk:
            return pass_name(self.nodes, self.rate, trunk=self.trunk)
        return pass_name(self.nodes, self.rate, stragglers=not self.in_sweep)


def pass_name(nodes: int, rate: str, *, trunk: str | None = None, stragglers: bool = False) -> str:
    """A pass of `bench cluster`, as `settings["failed"]` names it before the colon that starts
    its error."""
    where = f"{nodes} nodes at {rate}"
    if trunk:
        return f"{where} on two racks, trunk {trunk}"
    return f"stragglers on {where}" if stragglers else where


@dataclass(frozen=True)
class Calibration:
    """Per model, measured on one process before the passes (`calibrate`, `layer_times`): the
    optimizer's tail of a one-node step, the stand-in's own work (taken off its waits), its
    backward layer by layer (`BackwardTiming`) and the calibrated stand-in's step alone.
    Results written before the calibration existed have only tails; before the backward was
    measured, no `backward` (their stand-ins waited the layers' MAC shares)."""

    tail_s: dict[str, float]
    own_s: dict[str, float] = field(default_factory=dict)
    alone_s: dict[str, float] = field(default_factory=dict)
    backward: dict[str, BackwardTiming] = field(default_factory=dict)

    def merged(self, other: Calibration) -> Calibration:
        return Calibration(
            {**self.tail_s, **other.tail_s},
            {**self.own_s, **other.own_s},
            {**self.alone_s, **other.alone_s},
            {**self.backward, **other.backward},
        )


@dataclass(frozen=True)
class ClusterResult:
    settings: dict[str, Any]
    host: dict[str, Any]
    calibration: Calibration
    links: list[ProbedLink]
    rows: list[ClusterRow]

    def to_dict(self) -> dict[str, Any]:
        return {
            "benchmark": "cluster",
            "settings": self.settings,
            "host": self.host,
            "optimizer_tail_s": self.calibration.tail_s,
            "standin_own_s": self.calibration.own_s,
            "standin_alone_s": self.calibration.alone_s,
            "standin_backward": {m: asdict(b) for m, b in self.calibration.backward.items()},
            "links": [asdict(link) for link in self.links],
            "rows": [asdict(row) for row in self.rows],
        }

    @classmethod
    def read(cls, path: Path) -> ClusterResult:
        """A `bench cluster` JSON; an `InputError` naming the file and the key it lacks."""
        try:
            raw = json.loads(path.read_text())
            return cls(
                settings=raw["settings"],
                host=raw["host"],
                calibration=Calibration(
                    raw["optimizer_tail_s"],
                    raw.get("standin_own_s", {}),
                    raw.get("standin_alone_s", {}),
                    {
                        model: BackwardTiming(
                            found["fraction"], tuple(found["ready"]), tuple(found["sizes"])
                        )
                        for model, found in raw.get("standin_backward", {}).items()
                    },
                ),
                links=[ProbedLink(**link) for link in raw["links"]],
                rows=[ClusterRow(**row) for row in raw["rows"]],
            )
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise InputError(f"{path}: not a bench cluster result ({err})") from None


def label(strategy: str, hook: str, k: int) -> str:
    if strategy == "aavg":
        return f"aavg k={k}"
    return "ddp" if hook == "none" else f"ddp+{hook}"


def measured_step(row: dict[str, Any]) -> tuple[float, float, float, float, float]:
    """(step, exposed communication, bytes, stretch, CPU a rank) of a measured row: per step
    the slowest rank's; the median step for DDP, the mean for AAVG (its averaging comes every
    k steps); the CPU seconds a rank's process used a step, the mean over ranks and steps."""
    ranks = row["ranks"]
    steps = [max(r["step_s"][i] for r in ranks) for i in range(len(ranks[0]["step_s"]))]
    pick = statistics.fmean if row["strategy"] == "aavg" else statistics.median
    exposed = pick(
        [statistics.fmean(r["comm_exposed_s"][i] for r in ranks) for i in range(len(steps))]
    )
    sent = statistics.fmean(ranks[0]["comm_bytes"])
    stretch = statistics.fmean(statistics.fmean(r["stretched_s"]) for r in ranks)
    cpu = statistics.fmean(statistics.fmean(r.get("cpu_s") or [0.0]) for r in ranks)
    return pick(steps), exposed, sent, stretch, cpu


def predict_row(
    cfg: ClusterConfig,
    baseline: dict[str, Any],
    links: dict[tuple[int, str], ProbedLink],
    row: dict[str, Any],
) -> float:
    """The planner's step for a measured row, from the one-node inputs and the probes only."""
    shape = ClipShape.of(baseline["settings"])
    model = row["model"]
    costs, shapes, averaged, buffers = _model_facts(
        model, shape.frames, shape.size, shape.num_classes
    )
    unshaped = [link for link in baseline["links"] if link["shaped_bits_per_s"] is None]
    cpu = 1.0 / unshaped[0]["allreduce_bytes_per_s"] if unshaped else 0.0
    run = row.get("run", 0)
    probed = links[run, row["rate"]]
    # A straggler's link and a trunk alike bound the ring; the trunk's rate is shared by the
    # ring's hops across it (`planner.cluster_model.trunk_hops`).
    slower = [links[run, row["slow_link"]].bytes_per_s] if row["slow_link"] else []
    if row.get("trunk"):
        slower.append(links[run, row["trunk"]].bytes_per_s / max(1, row["trunk_hops"]))
    slow = min(slower) if slower else None
    link = ClusterLink(
        procs=row["nodes"],
        link_bytes_per_s=probed.bytes_per_s,
        pair_latency_s=probed.latency_s,
        cpu_s_per_byte=cpu,
        cores=cfg.cores,
        slowest_bytes_per_s=slow,
    )
    ddp = row["strategy"] == "ddp"
    variant = LinkVariant(row["strategy"], row["hook"], row["k"])
    return predict_cluster_step(
        costs,
        variant,
        link,
        one_process_s=baseline["one_process_step_s"][model],
        bucket_mb=cfg.bucket_cap_mb,
        averaged_bytes=averaged,
        param_shapes=list(shapes),
        per_step_bytes=buffers if ddp else 0.0,
        per_step_messages=2 if ddp else 1,
        hook_compute_s=baseline["hook_compute_s"][model].get(row["hook"], 0.0) if ddp else 0.0,
        slow_factor=row["slow_factor"],
    ).step_s


def build(
    cfg: ClusterConfig,
    baseline: dict[str, Any],
    calibration: Calibration,
    links: list[ProbedLink],
    measured: list[dict[str, Any]],
    *,
    failed: list[str] | None = None,
) -> ClusterResult:
    """The result of `measured` rows; `failed` names the passes whose ranks failed (kept in
    the settings, so that a missing row says why)."""
    by_rate = {(link.run, link.rate): link for link in links}
    rows = []
    for found in measured:
        step, exposed, sent, stretch, cpu = measured_step(found)
        one = baseline["one_process_step_s"][found["model"]]
        predicted = predict_row(cfg, baseline, by_rate, found)
        rows.append(
            ClusterRow(
                rate=found["rate"],
                nodes=found["nodes"],
                model=found["model"],
                variant=label(found["strategy"], found["hook"], found["k"]),
                strategy=found["strategy"],
                hook=found["hook"],
                k=found["k"],
                slow_link=found["slow_link"],
                slow_factor=found["slow_factor"],
                trunk=found.get("trunk"),
                trunk_hops=found.get("trunk_hops", 0),
                step_s=step,
                comm_exposed_s=exposed,
                comm_bytes_per_step=sent,
                stretched_s=stretch,
                one_process_step_s=one,
                efficiency=one / step,
                predicted_step_s=predicted,
                error=predicted / step - 1,
                cpu_s=cpu,
            )
        )
    host = {**describe(torch.device("cpu")), "load_average": load_average()}
    settings = {**cfg.as_dict(), "failed": failed or []}
    return ClusterResult(settings, host, calibration, links, rows)


def format_calibration(calibration: Calibration, waited: dict[str, float]) -> str:
    """One line per model: the calibrated stand-in alone against the one-node step it waits
    (`waited`, per model)."""
    lines = []
    for model, alone in calibration.alone_s.items():
        one = waited[model]
        lines.append(
            f"stand-in alone: {model} {alone:.3f} s against the one-node {one:.3f} s "
            f"({alone / one - 1:+.1%}; its own work {calibration.own_s[model]:.3f} s, "
            "taken off its waits)"
        )
    for model, backward in calibration.backward.items():
        lines.append(
            f"stand-in backward: {model} {backward.fraction:.1%} of forward and backward "
            f"(the planner assumes {BACKWARD_FRACTION:.1%}); half its parameters' gradients "
            f"ready at {backward.half_ready:.0%} of it, measured layer by layer"
        )
    return "\n".join(lines)


def busy(row: ClusterRow, cores: int) -> float:
    """The share of the machine's `cores` the row's ranks kept busy: N ranks' CPU a step over
    the cores' seconds in it. Near 1, the step was bounded by this machine's cores, which a
    cluster's nodes (each with cores of its own) would not share; 0 where not recorded."""
    return row.nodes * row.cpu_s / (cores * row.step_s)


def format_table(result: ClusterResult) -> str:
    cores = int(result.settings.get("cores", 2))
    head = (
        f"{'link':>8} {'N':>3} {'model':<20} {'variant':<14} {'straggler':<12} {'step s':>7} "
        f"{'comm':>6} {'eff':>5} {'MB/step':>8} {'busy':>5} {'pred s':>7} {'error':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in result.rows:
        straggler = (
            f"link {r.slow_link}"
            if r.slow_link
            else (f"compute x{r.slow_factor:g}" if r.slow_factor != 1 else "")
        )
        straggler = f"trunk {r.trunk}" if r.trunk else straggler
        lines.append(
            f"{r.rate:>8} {r.nodes:>3} {r.model:<20} {r.variant:<14} {straggler:<12} "
            f"{r.step_s:7.3f} {r.comm_exposed_s:6.3f} {r.efficiency:5.2f} "
            f"{r.comm_bytes_per_step / 1e6:8.1f} {busy(r, cores):5.2f} {r.predicted_step_s:7.3f} "
            f"{r.error:+7.1%}"
        )
    return "\n".join(lines)


def plot_cluster(result: ClusterResult, path: Path) -> None:
    """Efficiency against nodes, one panel per rate, a line per model and variant (the
    planner's dashed); straggler and two-rack rows left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result.rows if r.in_sweep]
    rates = list(dict.fromkeys(r.rate for r in rows))
    fig, axes = plt.subplots(1, len(rates), figsize=(6 * len(rates), 4.5), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        series = dict.fromkeys((r.model, r.variant) for r in rows if r.rate == rate)
        for model, variant in series:
            line = sorted(
                (r for r in rows if (r.rate, r.model, r.variant) == (rate, model, variant)),
                key=lambda r: r.nodes,
            )
            xs = [r.nodes for r in line]
            drawn = ax.plot(
                xs, [r.efficiency for r in line], marker="o", label=f"{model} {variant}"
            )
            planned = [r.one_process_step_s / r.predicted_step_s for r in line]
            ax.plot(xs, planned, linestyle="--", color=drawn[0].get_color(), alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xticks([2, 4, 8, 16], ["2", "4", "8", "16"])
        ax.set_ylim(0, 1.1)
        ax.set_xlabel("nodes (one stand-in rank each)")
        ax.set_ylabel("scaling efficiency")
        ax.set_title(f"links {rate} (dashed: planner)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replan(result: ClusterResult) -> ClusterResult:
    """`result`'s measurements with the planner's predictions made again as it is now (from the
    same one-node inputs, `settings["baseline"]`, and the same probes)."""
    cfg = ClusterConfig(
        bucket_cap_mb=result.settings["bucket_cap_mb"],
        cores=result.settings["cores"],
        baseline=Path(result.settings["baseline"]),
    )
    baseline = cfg.read_baseline()
    by_rate = {(link.run, link.rate): link for link in result.links}
    rows = []
    for row in result.rows:
        predicted = predict_row(cfg, baseline, by_rate, asdict(row))
        rows.append(replace(row, predicted_step_s=predicted, error=predicted / row.step_s - 1))
    return replace(result, rows=rows)


def combine(results: list[ClusterResult]) -> ClusterResult:
    """Several runs' rows and probes as one result, each row predicted from its own run's
    probes (`run`); the first run's settings, each run's load average under
    `host["load_averages"]`. `settings["failed"]` names every run's failed passes that no run
    measured: a pass one run lost and another measured is not missing from the result."""
    first = results[0]
    host = {**first.host, "load_averages": [r.host.get("load_average") for r in results]}
    links = [replace(link, run=i) for i, r in enumerate(results) for link in r.links]
    rows = [replace(row, run=i) for i, r in enumerate(results) for row in r.rows]
    calibration = first.calibration
    for result in results[1:]:
        calibration = calibration.merged(result.calibration)
    measured = {row.pass_name for row in rows}
    failed = [
        entry
        for result in results
        for entry in result.settings.get("failed", [])
        if entry.split(":", 1)[0] not in measured
    ]
    return ClusterResult({**first.settings, "failed": failed}, host, calibration, links, rows)


@dataclass(frozen=True)
class StandInCheck:
    """A two-node stand-in row beside the real two-node row of the same rate, model and
    variant (`bench network`): both steps, the communication each waited, and each one's
    compute (the step less that wait) over the control's, the real compute of that rate's and
    model's AAVG row averaging once an epoch (what `in_pass` stand-ins wait; None where the
    real run has no such row). A step's difference is then split into the part that is the
    communication's and the part that is the compute's, each measured."""

    rate: str
    model: str
    variant: str
    standin_s: float
    real_s: float
    standin_comm_s: float
    real_comm_s: float
    real_compute_s: float
    control_s: float | None

    @property
    def diff(self) -> float:
        """stand-in / real - 1 (issue 46: within 5%)."""
        return self.standin_s / self.real_s - 1

    def over_control(self, compute_s: float) -> float | None:
        return None if not self.control_s else compute_s / self.control_s - 1

    @property
    def standin_compute_over_control(self) -> float | None:
        return self.over_control(self.standin_s - self.standin_comm_s)

    @property
    def real_compute_over_control(self) -> float | None:
        return self.over_control(self.real_compute_s)


def standin_check(result: ClusterResult, network: Path) -> list[StandInCheck]:
    """Each two-node stand-in row of the sweep next to the real two-node row `bench network`
    measured for the same rate, model and variant (`network`, its JSON)."""
    measured = json.loads(network.read_text())
    real = {(r["rate"], r["model"], r["variant"]): r for r in measured["rows"]}
    control = {(r["rate"], r["model"]): r["compute_s"] for r in once_an_epoch(measured)}
    out = []
    for row in result.rows:
        key = (row.rate, row.model, row.variant)
        if row.nodes == 2 and row.in_sweep and key in real:
            found = real[key]
            out.append(
                StandInCheck(
                    *key,
                    standin_s=row.step_s,
                    real_s=found["step_s"],
                    standin_comm_s=row.comm_exposed_s,
                    real_comm_s=found["comm_exposed_s"],
                    real_compute_s=found["compute_s"],
                    control_s=control.get((row.rate, row.model)),
                )
            )
    return out


def format_standin_check(result: ClusterResult, network: Path) -> str:
    """`standin_check` as a table: each two-node stand-in step, the real one, their difference
    (issue 46: the stand-in within 5% of the real two-node step at each rate), then where it
    lies: the communication each waited a step, and each one's compute over the control."""
    head = (
        f"{'link':>8} {'model':<20} {'variant':<14} {'stand-in':>8} {'real':>7} {'diff':>7}   "
        f"{'comm s':>15}   {'compute/control':>15}"
    )
    pair = f"{'stand-in':>8} {'real':>6}"
    under = f"{'':>72}{pair}   {pair}"
    lines = [head, under, "-" * len(under)]

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1%}"

    for c in standin_check(result, network):
        lines.append(
            f"{c.rate:>8} {c.model:<20} {c.variant:<14} {c.standin_s:8.3f} {c.real_s:7.3f} "
            f"{c.diff:+7.1%}   {c.standin_comm_s:8.3f} {c.real_comm_s:6.3f}   "
            f"{share(c.standin_compute_over_control):>8} {share(c.real_compute_over_control):>6}"
        )
    return "\n".join(lines)
