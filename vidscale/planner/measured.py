"""What `vidscale plan --measured` reads from a `vidscale bench scaling` JSON: one model's
measured compute and data wait per step (its 1-process run) and the measured overlap of the
gradient all-reduce with the backward pass next to what the overlap model predicts for that same
run (`MeasuredOverlap`). `capacity.with_measured` puts them into a plan's request."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from vidscale.bench.scaling.result import ScalingResult, ScalingRun
from vidscale.errors import InputError
from vidscale.models.costs import model_costs
from vidscale.planner.overlap import MIB, Bucketing, ddp_buckets, exposed_comm, gradient_arrivals
from vidscale.planner.scaling_model import Workload


@dataclass(frozen=True)
class MeasuredOverlap:
    """The gradient all-reduce of a multi-process plain-DDP run of `bench scaling`, and what the
    overlap model predicts for that same run.

    Measured: `in_flight_s` seconds per step with an all-reduce in flight, of which the step
    waited `exposed_s`, both without DDP's forward buffer broadcast (not the gradient
    all-reduce), for `nbytes` bytes all-reduced per step. Predicted (`overlap.exposed_comm`, DDP
    buckets of `bucket_mb` MiB): the backward pass is the model's share of the run's measured
    compute `compute_s`, gradients become ready in proportion to the layers' MACs, and each
    bucket's all-reduce takes its bytes' share of the measured `in_flight_s`, so that only the
    schedule (when each bucket can start) is the model's.
    """

    label: str
    procs: int
    compute_s: float
    in_flight_s: float
    exposed_s: float
    nbytes: float
    bucket_mb: float
    buckets: int
    predicted_exposed_s: float

    @property
    def hidden(self) -> float:
        """The measured share of the all-reduce hidden under the backward pass."""
        return 1.0 - self.exposed_s / self.in_flight_s

    @property
    def predicted_hidden(self) -> float:
        """The overlap model's share for the same run."""
        return 1.0 - self.predicted_exposed_s / self.in_flight_s

    @property
    def bandwidth_gbps(self) -> float:
        """Gb/s per process of the ring that moves `nbytes` in `in_flight_s` (2(P-1)/P x bytes
        per second; latency neglected)."""
        return 2 * (self.procs - 1) / self.procs * self.nbytes / self.in_flight_s * 8 / 1e9

    def network_note(self, measured: Measured) -> str:
        return (
            f"network: measured {self.bandwidth_gbps:.3g} Gb/s per process ({measured.path}, "
            f"run {self.label}: {self.nbytes / 1e6:.1f} MB all-reduced per step in "
            f"{self.in_flight_s:.3f} s in flight, the backward pass running beside it)"
        )


@dataclass(frozen=True)
class Measured:
    """What `plan --measured` takes from a `vidscale bench scaling` JSON for one model: the
    1-process run's (`label`) compute and data wait per step at `batch` clips per process of
    `frames` x `size`², the device it ran on, and the multi-process plain-DDP run's all-reduce
    (`overlap`; None, with the reason in `no_overlap`, where the file has no such run)."""

    path: Path
    model: str
    label: str
    device: str  # the run's torch device: cpu, cuda, cuda:0
    device_name: str  # the host's CPU model or GPU name
    threads: int
    workers: int
    frames: int
    size: int
    batch: int
    compute_s: float
    data_wait_s: float
    overlap: MeasuredOverlap | None
    no_overlap: str = ""

    @property
    def on_cpu(self) -> bool:
        return not self.device.startswith("cuda")

    @property
    def clip_s(self) -> float:
        """Compute seconds per clip at the measured batch."""
        return self.compute_s / self.batch

    @property
    def data_clip_s(self) -> float:
        """Data wait seconds per clip at the measured batch."""
        return self.data_wait_s / self.batch

    @property
    def where(self) -> str:
        """The file, the run and the device, as the assumption lines name them."""
        return (
            f"{self.path}, run {self.label}, device {self.device}: {self.device_name}, "
            f"{self.threads} thread(s) per process"
        )

    def compute_note(self, step_time: float, frames: int) -> str:
        note = (
            f"compute: measured {self.compute_s:.4g} s per step at {self.batch} clips per "
            f"process = {self.clip_s:.4g} s per clip ({self.where}; its step less its data wait)"
        )
        ratio = step_time / self.compute_s
        if not math.isclose(ratio, 1.0, rel_tol=1e-9):
            note += (
                f"; x {ratio:.3g} by MACs for the plan's {frames}x224² clips (measured on "
                f"{self.frames}x{self.size}²)"
            )
        return note

    def data_note(self) -> str:
        return (
            f"data loading: measured wait {1e3 * self.data_clip_s:.3g} ms per clip ({self.where}):"
            f" in-memory random clips, {self.workers} loader worker(s), the loader's own "
            "overhead without decoding (`vidscale bench data` times decoding; --data-time "
            "replaces it)"
        )


def _measured_overlap(run: ScalingRun, report: ScalingResult, model: str) -> MeasuredOverlap | str:
    """The overlap of `run` (a multi-process plain-DDP run), or why there is none."""
    settings = report.settings
    in_flight = run.comm_in_flight_s - run.forward_sync_s
    exposed = min(max(0.0, run.comm_exposed_s - run.forward_sync_s), in_flight)
    nbytes, compute_s = float(run.comm_bytes_per_step), float(run.compute_s)
    if not (in_flight > 0 and nbytes > 0 and compute_s > 0):
        return f"run {run.label} has no all-reduce time in flight or no compute"
    costs = model_costs(
        model, frames=settings.frames, size=settings.size, num_classes=settings.num_classes
    )
    backward_s = compute_s * Workload.backward_fraction
    per_param = nbytes / costs.params
    bucketing = Bucketing(framework="ddp", bucket_mb=float(settings.bucket_cap_mb))

    def cost(size: float) -> float:  # the measured all-reduce time, shared out by bytes
        return in_flight * size / nbytes

    predicted = exposed_comm(
        costs, cost, bucketing, backward_s=backward_s, bytes_per_param=per_param
    )
    arrivals = gradient_arrivals(costs, backward_s=backward_s, bytes_per_param=per_param)
    cap = bucketing.bucket_mb * MIB
    return MeasuredOverlap(
        label=run.label,
        procs=run.procs,
        compute_s=compute_s,
        in_flight_s=in_flight,
        exposed_s=exposed,
        nbytes=nbytes,
        bucket_mb=bucketing.bucket_mb,
        buckets=len(ddp_buckets(arrivals, cap_bytes=cap, first_cap_bytes=cap)),
        predicted_exposed_s=predicted,
    )


def read_measured(path: Path, model: str) -> Measured:
    """`model`'s measured inputs from the `vidscale bench scaling` JSON at `path`
    (`ScalingResult.read`).

    The compute and data wait are the 1-process run's; the overlap is the smallest
    multi-process plain-DDP run's (2 processes for `--nproc 1,2`). Raises `InputError` (a
    `ValueError`), one line naming `--measured` and the file, for a missing or unreadable
    file, a file that is not such a JSON or lacks a key (named) or has one ill-typed, a model
    it has no runs of (naming the models it has), no 1-process run, or a 1-process run with
    no batch or compute.
    """
    where = f"--measured: {path}"
    try:
        report = ScalingResult.read(path)
    except ValueError as err:
        raise InputError(f"--measured: {err}") from None
    single, ddp = _runs_of(report, model, where)
    if single.batch_per_process < 1 or not single.compute_s > 0 or not single.data_wait_s >= 0:
        raise InputError(
            f"{where}: bad `vidscale bench scaling` JSON (run {single.label}: batch "
            f"{single.batch_per_process}, compute {single.compute_s} s, data wait "
            f"{single.data_wait_s} s)"
        )
    overlap = _measured_overlap(ddp[0], report, model) if ddp else None
    return Measured(
        path=path,
        model=model,
        label=single.label,
        device=single.device,
        device_name=report.host.name,
        threads=report.settings.threads,
        workers=report.settings.workers,
        frames=report.settings.frames,
        size=report.settings.size,
        batch=single.batch_per_process,
        compute_s=float(single.compute_s),
        data_wait_s=float(single.data_wait_s),
        overlap=overlap if isinstance(overlap, MeasuredOverlap) else None,
        no_overlap=(
            overlap
            if isinstance(overlap, str)
            else f"{path} has no multi-process plain-DDP run of {model} "
            "(`bench scaling --nproc 1,2` with hook none measures it)"
        ),
    )


def _runs_of(report: ScalingResult, model: str, where: str) -> tuple[ScalingRun, list[ScalingRun]]:
    """`model`'s 1-process run and its multi-process plain-DDP runs, fewest processes first."""
    if model not in report.models:
        raise InputError(
            f"{where} has no runs of --model {model}; its models: "
            f"{', '.join(report.models) or 'none'}"
        )
    mine = report.runs_of(model)
    single = next((r for r in mine if r.procs == 1), None)
    if single is None:
        counts = ", ".join(sorted({str(r.procs) for r in mine}))
        raise InputError(
            f"{where} has no 1-process run of {model} (only {counts} processes): its compute "
            "is measured on one process (`bench scaling --nproc 1 ...`)"
        )
    ddp = sorted(
        (r for r in mine if r.strategy == "ddp" and r.hook == "none" and r.procs > 1),
        key=lambda r: r.procs,
    )
    return single, ddp
