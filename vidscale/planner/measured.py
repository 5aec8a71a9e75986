"""What `vidscale plan --measured` reads from a `vidscale bench scaling` JSON: one model's
measured compute and data wait per step (its 1-process run) and the measured overlap of the
gradient all-reduce with the backward pass next to what the overlap model predicts for that same
run (`MeasuredOverlap`). `capacity.with_measured` puts them into a plan's request."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.planner.layer_costs import model_costs
from vidscale.planner.overlap import MIB, Bucketing, ddp_buckets, exposed_comm, gradient_arrivals
from vidscale.planner.scaling_model import Workload


def _run_label(row: Mapping[str, Any]) -> str:
    """A run of the JSON as its table shows it: `tsm_resnet50 1 process`, `... ddp, 2 processes`."""
    procs = int(row["procs"])
    return f"{row['model']} {row['variant']}" + ("" if procs == 1 else f", {procs} processes")


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


def _measured_overlap(
    row: Mapping[str, Any], settings: Mapping[str, Any], model: str
) -> MeasuredOverlap | str:
    """The overlap of `row` (a multi-process plain-DDP run), or why there is none."""
    forward = float(row["forward_sync_s"])
    in_flight = float(row["comm_in_flight_s"]) - forward
    exposed = min(max(0.0, float(row["comm_exposed_s"]) - forward), in_flight)
    nbytes = float(row["comm_bytes_per_step"])
    compute_s = float(row["compute_s"])
    label = _run_label(row)
    if not (in_flight > 0 and nbytes > 0 and compute_s > 0):
        return f"run {label} has no all-reduce time in flight or no compute"
    costs = model_costs(
        model,
        frames=int(settings["frames"]),
        size=int(settings["size"]),
        num_classes=int(settings["num_classes"]),
    )
    backward_s = compute_s * Workload.backward_fraction
    per_param = nbytes / costs.params
    bucketing = Bucketing(framework="ddp", bucket_mb=float(settings["bucket_cap_mb"]))

    def cost(size: float) -> float:  # the measured all-reduce time, shared out by bytes
        return in_flight * size / nbytes

    predicted = exposed_comm(
        costs, cost, bucketing, backward_s=backward_s, bytes_per_param=per_param
    )
    arrivals = gradient_arrivals(costs, backward_s=backward_s, bytes_per_param=per_param)
    cap = bucketing.bucket_mb * MIB
    return MeasuredOverlap(
        label=label,
        procs=int(row["procs"]),
        compute_s=compute_s,
        in_flight_s=in_flight,
        exposed_s=exposed,
        nbytes=nbytes,
        bucket_mb=bucketing.bucket_mb,
        buckets=len(ddp_buckets(arrivals, cap_bytes=cap, first_cap_bytes=cap)),
        predicted_exposed_s=predicted,
    )


def read_measured(path: Path, model: str) -> Measured:
    """`model`'s measured inputs from the `vidscale bench scaling` JSON at `path`.

    The compute and data wait are the 1-process run's; the overlap is the smallest
    multi-process plain-DDP run's (2 processes for `--procs 1 2`). Raises ValueError, one line
    naming `--measured` and the file, for a missing or unreadable file, a file that is not such
    a JSON, a model it has no runs of (naming the models it has), or no 1-process run.
    """
    where = f"--measured: {path}"
    report = _load_report(path, where)
    single, ddp = _runs_of(report, model, where)
    try:
        return _measured(path, model, report, single, ddp)
    except KeyError as err:
        raise ValueError(
            f"{where}: not a complete `vidscale bench scaling` JSON (no {err})"
        ) from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: bad `vidscale bench scaling` JSON ({err})") from None


def _load_report(path: Path, where: str) -> dict[str, Any]:
    """The JSON at `path`, checked to be a `bench scaling` report with a list of runs."""
    try:
        report = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"{where}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:  # not UTF-8, or not JSON
        raise ValueError(f"{where}: not JSON ({err})") from None
    if (
        not isinstance(report, dict)
        or report.get("benchmark") != "scaling"
        or not isinstance(report.get("runs"), list)
    ):
        raise ValueError(
            f'{where}: not a `vidscale bench scaling` JSON (no "benchmark": "scaling" and runs)'
        )
    return report


def _runs_of(
    report: Mapping[str, Any], model: str, where: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`model`'s 1-process run and its multi-process plain-DDP runs, fewest processes first."""
    runs = [r for r in report["runs"] if isinstance(r, dict)]
    models = list(dict.fromkeys(str(r.get("model")) for r in runs))
    if model not in models:
        raise ValueError(
            f"{where} has no runs of --model {model}; its models: {', '.join(models) or 'none'}"
        )
    mine = [r for r in runs if r.get("model") == model]
    single = next((r for r in mine if r.get("procs") == 1), None)
    if single is None:
        counts = ", ".join(sorted({str(r.get("procs")) for r in mine}))
        raise ValueError(
            f"{where} has no 1-process run of {model} (only {counts} processes): its compute "
            "is measured on one process (`bench scaling --procs 1 ...`)"
        )
    ddp = sorted(
        (
            r
            for r in mine
            if r.get("strategy") == "ddp"
            and r.get("hook") == "none"
            and isinstance(r.get("procs"), int)
            and r["procs"] > 1
        ),
        key=lambda r: int(r["procs"]),
    )
    return single, ddp


def _measured(
    path: Path,
    model: str,
    report: Mapping[str, Any],
    single: Mapping[str, Any],
    ddp: list[dict[str, Any]],
) -> Measured:
    """The numbers of the runs; KeyError, TypeError or ValueError where one is missing or bad."""
    settings, host = report["settings"], report["host"]
    batch = int(single["batch_per_process"])
    compute_s, data_wait_s = float(single["compute_s"]), float(single["data_wait_s"])
    if batch < 1 or not compute_s > 0 or not data_wait_s >= 0:
        raise ValueError(
            f"run {_run_label(single)}: batch {batch}, compute {compute_s} s, "
            f"data wait {data_wait_s} s"
        )
    overlap = _measured_overlap(ddp[0], settings, model) if ddp else None
    return Measured(
        path=path,
        model=model,
        label=_run_label(single),
        device=str(single["device"]),
        device_name=str(host["name"]),
        threads=int(settings["threads"]),
        workers=int(settings["workers"]),
        frames=int(settings["frames"]),
        size=int(settings["size"]),
        batch=batch,
        compute_s=compute_s,
        data_wait_s=data_wait_s,
        overlap=overlap if isinstance(overlap, MeasuredOverlap) else None,
        no_overlap=(
            overlap
            if isinstance(overlap, str)
            else f"{path} has no multi-process plain-DDP run of {model} "
            "(`bench scaling --procs 1 2` with hook none measures it)"
        ),
    )
