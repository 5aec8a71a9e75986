"""`vidscale plan`: how long, how many GPUs, which model scales better (the scaling model applied).

`plan(request)` answers "how long for E epochs of N clips with this model on P GPUs of this kind
over this network"; `gpus_for_target` inverts it ("how many GPUs for a target time"); `compare`
tabulates several models over GPU counts. Inputs come from a hardware preset
(`planner/clusters.py`) and may be replaced by measurements (`PlanRequest`'s optional fields), or
read from a `vidscale bench scaling` JSON (`read_measured`, `with_measured`: `plan --measured`),
which also gives the measured overlap of the all-reduce with the backward pass next to what the
overlap model predicts for the same run (`MeasuredOverlap`). Each answer carries the largest global batch the project's recipes know to keep accuracy
(`batch_limit`), so that a plan that needs more GPUs than the recipe's batch allows says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.models.registry import list_models
from vidscale.planner.clusters import (
    PRESETS,
    RESNET50_MACS,
    Hardware,
    gpu_compute,
    hardware,
    relative_work,
    utilisation,
)
from vidscale.planner.layer_costs import model_costs
from vidscale.planner.overlap import (
    MIB,
    Bucketing,
    Framework,
    ddp_buckets,
    exposed_comm,
    gradient_arrivals,
)
from vidscale.planner.scaling_model import (
    GRAD_BYTES,
    Cluster,
    GpuCompute,
    Prediction,
    Workload,
    predict,
)


@dataclass(frozen=True)
class PlanRequest:
    """One question to the planner. `None` fields take the hardware preset's value.

    `step_time`: measured seconds of one GPU's compute for one step at `step_time_batch` clips
    (default `batch_per_gpu`; no communication: a one-GPU step, e.g. from `vidscale bench
    models`). `data_time`: the loader's wall seconds per clip for one GPU (None: hidden).
    `bandwidth_gbps`: achieved per-node injection bandwidth (Gb/s); `latency_us`: the network
    hop latency; `bucket_mb`: DDP's bucket cap or Horovod's fusion threshold; `grad_dtype`:
    fp32, or bf16/fp16 for a compression hook. `measured`: the `bench scaling` JSON the fields
    named in `from_measured` were taken from (`with_measured`).
    """

    model: str = "tsm_resnet50"
    hardware: str = "summit"
    gpus: int | None = None
    batch_per_gpu: int = 8
    epochs: float = 100.0
    clips: int = 240_000
    frames: int | None = None
    step_time: float | None = None
    step_time_batch: int | None = None
    data_time: float | None = None
    bandwidth_gbps: float | None = None
    latency_us: float | None = None
    gpus_per_node: int | None = None
    bucket_mb: float | None = None
    framework: Framework | None = None
    grad_dtype: str = "fp32"
    step_time_source: str = "measured"
    measured: Measured | None = None
    from_measured: frozenset[str] = frozenset()


@dataclass(frozen=True)
class BatchLimit:
    """The largest global batch known to keep accuracy, and where the number comes from."""

    keeps: int
    source: str


def _tsm_limit() -> BatchLimit:
    """From Table 3 (`recipes.kinetics.TABLE3_TOP1`): the largest batch whose top-1 is within
    0.2 points of the 96-clip baseline's 74.12%, which is the paper's own split ("same level of
    accuracy" up to 1,536 GPUs, "lose accuracy" from 2,304)."""
    from vidscale.recipes.kinetics import TABLE3_GPUS, TABLE3_TOP1

    baseline = 74.12
    top1 = {8 * g: float(TABLE3_TOP1[g].split()[0]) for g in TABLE3_GPUS}
    keeps = max(b for b, acc in top1.items() if acc >= baseline - 0.2)
    first_loss = min(b for b, acc in top1.items() if b > keeps)
    return BatchLimit(
        keeps=keeps,
        source=f"TSM paper Table 3 (recipes tsm_r50_k400_8f_b*_e100): {top1[keeps]:.2f}% at "
        f"{keeps:,} vs {baseline}% at 96; {first_loss:,} loses "
        f"{baseline - top1[first_loss]:.1f} points ({top1[first_loss]:.2f}%)",
    )


def batch_limit(model: str) -> BatchLimit | None:
    """The project's recipes' evidence for `model`, or None where there is none."""
    if model == "tsm_resnet50":
        return _tsm_limit()
    if model == "resnet50":
        return BatchLimit(
            32_768,
            "recipe resnet50_imagenet_b32k_e90_lars (You et al., LARS); SGD to 8,192 "
            "(resnet50_imagenet_b8k_e90_sgd, Goyal et al.)",
        )
    if model == "alexnet_bn":
        return BatchLimit(32_768, "recipe alexnet_bn_imagenet_b32k_e100_lars (You et al., LARS)")
    return None


@dataclass(frozen=True)
class Setup:
    """A request resolved to the scaling model's inputs (one GPU count)."""

    request: PlanRequest
    hw: Hardware
    work: Workload
    cluster: Cluster
    notes: tuple[str, ...]


def check_request(req: PlanRequest) -> Hardware:
    """The request's hardware, after checking every field; errors name the option."""
    if req.model not in list_models():
        raise ValueError(f"--model: unknown model {req.model!r}; see `vidscale models`")
    try:
        hw = hardware(req.hardware)
    except ValueError as err:
        raise ValueError(f"--hardware: {err}") from None
    if req.grad_dtype not in GRAD_BYTES:
        raise ValueError(
            f"--grad-dtype: expected one of {', '.join(GRAD_BYTES)}, got {req.grad_dtype!r}"
        )
    for flag, value, low in (
        ("--gpus", req.gpus, 1),
        ("--batch-per-gpu", req.batch_per_gpu, 1),
        ("--step-time batch", req.step_time_batch, 1),
        ("--clips", req.clips, 1),
        ("--gpus-per-node", req.gpus_per_node, 1),
    ):
        if value is not None and value < low:
            raise ValueError(f"{flag}: must be >= {low}, got {value}")
    for flag, number in (
        ("--epochs", req.epochs),
        ("--step-time", req.step_time),
        ("--bandwidth-gbps", req.bandwidth_gbps),
        ("--bucket-mb", req.bucket_mb),
    ):
        if number is not None and not number > 0:
            raise ValueError(f"{flag}: must be > 0, got {number}")
    for flag, number in (("--data-time", req.data_time), ("--latency-us", req.latency_us)):
        if number is not None and not number >= 0:
            raise ValueError(f"{flag}: must be >= 0, got {number}")
    if req.step_time is None and hw.reference is None:
        raise ValueError(
            f"--step-time: hardware {hw.name!r} has no measured compute rate; time one GPU's "
            "training step (e.g. `vidscale bench models`) and pass its seconds, or pass "
            "--measured with a `vidscale bench scaling` JSON"
        )
    return hw


def _bandwidth(req: PlanRequest, hw: Hardware, nodes: int) -> float | None:
    """`--bandwidth-gbps`, None for the preset's; a preset without a network rate needs one
    as soon as there is a network (on one node it is unused)."""
    if req.bandwidth_gbps is not None or hw.inter_gbps is not None:
        return req.bandwidth_gbps
    if nodes == 1:
        return math.inf
    why = ""
    if req.measured is not None:
        why = f" ({req.measured.path} has no multi-process plain-DDP run to measure it)"
    raise ValueError(
        f"--bandwidth-gbps: hardware {hw.name!r} has no network rate{why}; pass the achieved "
        "all-reduce bandwidth per node in Gb/s, or --measured with a `vidscale bench scaling` "
        "JSON of 1 and 2 processes"
    )


def nodes_for(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) for `gpus`: a partial node below one node, else whole nodes."""
    if gpus <= gpus_per_node:
        return 1, gpus
    if gpus % gpus_per_node:
        raise ValueError(
            f"--gpus: {gpus} is not a whole number of {gpus_per_node}-GPU nodes "
            "(see --gpus-per-node)"
        )
    return gpus // gpus_per_node, gpus_per_node


def _compute(req: PlanRequest, hw: Hardware, notes: list[str]) -> GpuCompute:
    if req.step_time is not None:
        # Split the measured step into per-clip and fixed work with the GPU kind's fixed share
        # (ResNet-50 images of work, in this model's clips); at the measured batch the split
        # changes nothing, it only labels the parts, at another batch it decides the step. A
        # step read from a CPU's `bench scaling` run is split as a CPU's: per-clip work only.
        m = req.measured if "step_time" in req.from_measured else None
        cpu_step = m is not None and m.on_cpu
        costs = model_costs(req.model, frames=req.frames)
        fixed_clips = 0.0 if cpu_step else hw.fixed_images * RESNET50_MACS / costs.macs
        at = req.step_time_batch or req.batch_per_gpu
        clip_s = req.step_time / (at + fixed_clips)
        compute = GpuCompute(clip_s=clip_s, fixed_s=fixed_clips * clip_s)
        if m is not None:
            note = m.compute_note(req.step_time, costs.frames)
        else:
            note = f"compute: {req.step_time_source} {req.step_time:.4g} s per step at {at} clips"
            if req.measured is not None and req.model == req.measured.model:
                note += f" (given: {req.measured.path}'s measured compute not used)"
        if at != req.batch_per_gpu:
            if cpu_step:
                fixed = "a CPU's step: per-clip work only, assumed"
            elif fixed_clips == 0:
                fixed = "per-clip work only"
            else:
                fixed = f"{hw.name}'s fixed work of {fixed_clips:.2f} clips per step kept"
            note += (
                f"; at {req.batch_per_gpu} clips per GPU: "
                f"{compute.step_s(req.batch_per_gpu):.4g} s ({fixed})"
            )
        notes.append(note)
        return compute
    assert hw.reference is not None
    ref = hw.reference
    scaled = "" if req.model == "tsm_resnet50" else ", scaled to this model by MACs"
    if req.model != "tsm_resnet50" and utilisation(req.model) is None:
        scaled += " (no Table 1 utilisation for it: TSM's assumed)"
    elif req.model != "tsm_resnet50":
        scaled += " and Table 1's relative utilisation"
    kind = "estimated" if ref.estimate else "from"
    notes.append(f"compute: {kind} {ref.source}{scaled}")
    return gpu_compute(req.model, hw, frames=req.frames)


def resolve(req: PlanRequest, *, gpus: int | None = None) -> Setup:
    """The scaling model's inputs for `req` on `gpus` GPUs (default `req.gpus`, else one node)."""
    hw = check_request(req)
    per_node = req.gpus_per_node or hw.gpus_per_node
    if gpus is None:  # default: one whole node
        gpus = req.gpus if req.gpus is not None else per_node
    if gpus < 1:
        raise ValueError(f"--gpus: must be >= 1, got {gpus}")
    nodes, per_node = nodes_for(gpus, per_node)
    notes: list[str] = []
    compute = _compute(req, hw, notes)
    costs = model_costs(req.model, frames=req.frames)
    work = Workload(
        costs=costs,
        batch_per_gpu=req.batch_per_gpu,
        compute=compute,
        data_clip_s=req.data_time or 0.0,
        grad_bytes=GRAD_BYTES[req.grad_dtype],
    )
    net = hw.interconnect(bandwidth_gbps=_bandwidth(req, hw, nodes), latency_us=req.latency_us)
    bucketing = hw.bucketing(framework=req.framework, bucket_mb=req.bucket_mb)
    cluster = Cluster(nodes=nodes, gpus_per_node=per_node, net=net, bucketing=bucketing)
    m = req.measured
    if m is not None and "batch_per_gpu" in req.from_measured:
        unit = "process" if hw.device == "cpu" else "GPU"
        notes.append(
            f"batch: {req.batch_per_gpu} clips per {unit}, the measured run's ({m.path}; "
            "--batch-per-gpu changes it)"
        )
    if m is not None and "data_time" in req.from_measured:
        notes.append(m.data_note())
    elif m is not None and req.data_time is not None:
        notes.append(
            f"data loading: --data-time {req.data_time:.4g} s per clip (given: {m.path}'s "
            "measured wait not used)"
        )
    elif not req.data_time:
        notes.append("data loading: assumed hidden (pass --data-time, seconds per clip)")
    if m is not None and m.overlap is not None and "bandwidth_gbps" in req.from_measured:
        notes.append(m.overlap.network_note(m))
    elif m is not None and m.overlap is not None and hw.inter_gbps is None:
        notes.append(
            f"network: --bandwidth-gbps {req.bandwidth_gbps:.4g} (given: {m.path}'s measured "
            f"{m.overlap.bandwidth_gbps:.3g} Gb/s not used)"
        )
    return Setup(req, hw, work, cluster, tuple(notes))


@dataclass(frozen=True)
class PlanResult:
    """A prediction with its setup and the recipe's batch evidence."""

    setup: Setup
    prediction: Prediction
    limit: BatchLimit | None = None

    @property
    def batch_ok(self) -> bool | None:
        if self.limit is None:
            return None
        return self.prediction.global_batch <= self.limit.keeps


def plan(req: PlanRequest, *, gpus: int | None = None) -> PlanResult:
    setup = resolve(req, gpus=gpus)
    pred = predict(setup.work, setup.cluster, epochs=req.epochs, clips=req.clips)
    return PlanResult(setup, pred, batch_limit(req.model))


# -- measured inputs: a `vidscale bench scaling` JSON (`plan --measured`) -----------------------


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
    try:
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
    except KeyError as err:
        raise ValueError(
            f"{where}: not a complete `vidscale bench scaling` JSON (no {err})"
        ) from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: bad `vidscale bench scaling` JSON ({err})") from None


def with_measured(req: PlanRequest, measured: Measured, *, keep_batch: bool = False) -> PlanRequest:
    """`req` with the inputs of `measured` in the fields it leaves open (explicit values win):
    the compute (`step_time` at the measured batch, by MACs for the plan's clip) and with it
    its batch per GPU unless `keep_batch`, the data wait per clip (`data_time`), and, for a
    preset without a network rate (`local`), the multi-process run's all-reduce bandwidth.
    `from_measured` names the fields taken."""
    if req.model != measured.model:
        raise ValueError(f"--measured: read for {measured.model}, the plan is of {req.model}")
    changes: dict[str, Any] = {}
    if req.step_time is None:
        if not keep_batch:  # the batch of the measured compute
            changes["batch_per_gpu"] = measured.batch
        plan_macs = model_costs(req.model, frames=req.frames).macs
        measured_macs = model_costs(req.model, frames=measured.frames, size=measured.size).macs
        changes["step_time"] = measured.compute_s * plan_macs / measured_macs
        changes["step_time_batch"] = measured.batch
    if req.data_time is None:
        changes["data_time"] = measured.data_clip_s
    preset = PRESETS.get(req.hardware)
    if (
        req.bandwidth_gbps is None
        and measured.overlap is not None
        and preset is not None
        and preset.inter_gbps is None
    ):
        changes["bandwidth_gbps"] = measured.overlap.bandwidth_gbps
    return dataclasses.replace(
        req, **changes, measured=measured, from_measured=frozenset(changes) - {"step_time_batch"}
    )


def measured_warnings(req: PlanRequest) -> list[str]:
    """A line where the measured compute comes from another kind of device than `--hardware`
    plans (a CPU's compute on a GPU preset, or the reverse): still what was asked for."""
    m, preset = req.measured, PRESETS.get(req.hardware)
    if m is None or preset is None or "step_time" not in req.from_measured:
        return []
    if m.on_cpu and preset.device == "gpu":
        return [
            f"{m.path} was measured on a CPU ({m.device_name}): the planned compute is that "
            f"CPU's, not that of the preset's {preset.gpu} GPUs (--hardware {preset.name}; "
            "--step-time replaces it)"
        ]
    if not m.on_cpu and preset.device == "cpu":
        return [
            f"{m.path} was measured on a GPU ({m.device_name}): --hardware {preset.name} "
            "plans CPU processes with that GPU's compute"
        ]
    return []


# -- how many GPUs for a target time ------------------------------------------------------------


@dataclass(frozen=True)
class TargetResult:
    """The fewest whole nodes (`result`) that train within `target_s`, or None with the fastest
    configuration found (`best`) when no node count up to the preset's maximum does."""

    target_s: float
    result: PlanResult | None
    best: PlanResult


def gpus_for_target(req: PlanRequest, target_s: float) -> TargetResult:
    """The smallest node count whose predicted time to train is <= `target_s`.

    Doubling finds a bracket, bisection the smallest node count inside it; the answer is then
    the model's own forward computation at that count (so `plan` at the returned GPUs agrees).
    The time is assumed to fall with the node count inside the bracket (true unless
    communication grows faster than compute shrinks, which the doubling also detects).
    """
    if not target_s > 0:
        raise ValueError(f"--target: must be > 0 s, got {target_s}")
    hw = check_request(req)
    per_node = req.gpus_per_node or hw.gpus_per_node
    evaluated: dict[int, PlanResult] = {}

    def at(nodes: int) -> PlanResult:
        if nodes not in evaluated:
            evaluated[nodes] = plan(req, gpus=nodes * per_node)
        return evaluated[nodes]

    low, high = 0, 1
    while at(high).prediction.train_s > target_s:
        if high >= hw.max_nodes:
            best = min(evaluated.values(), key=lambda r: r.prediction.train_s)
            return TargetResult(target_s, None, best)
        low, high = high, min(2 * high, hw.max_nodes)
        if at(high).prediction.train_s >= at(low).prediction.train_s:  # more nodes stopped helping
            best = min(evaluated.values(), key=lambda r: r.prediction.train_s)
            return TargetResult(target_s, None, best)
    while high - low > 1:
        mid = (low + high) // 2
        if at(mid).prediction.train_s <= target_s:
            high = mid
        else:
            low = mid
    return TargetResult(target_s, at(high), at(high))


# -- which model scales better ------------------------------------------------------------------


def default_gpu_counts(req: PlanRequest, *, max_nodes: int = 256) -> tuple[int, ...]:
    """One node, then doubling node counts up to `max_nodes` (or the preset's maximum)."""
    hw = check_request(req)
    per_node = req.gpus_per_node or hw.gpus_per_node
    counts, nodes = [], 1
    while nodes <= min(max_nodes, hw.max_nodes):
        counts.append(nodes * per_node)
        nodes *= 2
    return tuple(counts)


def compare(
    req: PlanRequest, models: tuple[str, ...], gpu_counts: tuple[int, ...]
) -> list[PlanResult]:
    """Every model at every GPU count (rows model-major). A measured `step_time` is the step of
    `req.model`; the other models' steps are scaled from it by `relative_work`."""
    check_request(req)
    results = []
    for model in models:
        one = dataclasses.replace(
            req, model=model, frames=req.frames if model == req.model else None
        )
        if req.step_time is not None and model != req.model:
            ratio = relative_work(model, req.model, frames=None)
            source = f"{req.model}'s measured step x {ratio:.3g} (MACs / utilisation):"
            one = dataclasses.replace(
                one,
                step_time=req.step_time * ratio,
                step_time_source=source,
                from_measured=req.from_measured - {"step_time"},
            )
        results += [plan(one, gpus=g) for g in gpu_counts]
    return results


# -- durations and formatting -------------------------------------------------------------------

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str) -> float:
    """Seconds in `text`: `15m`, `1h30m`, `10m9s`, `1.5h`, `2d`, or plain seconds (`900`)."""
    cleaned = text.strip().lower().replace(" ", "")
    try:
        seconds = float(cleaned)
    except ValueError:
        parts = _DURATION.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ValueError(f"expected a duration like 15m, 1h30m or 90s, got {text!r}") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"expected a positive duration, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """`49h 55m`, `14m 13s`, `9.5s` (hours and minutes above an hour, as Table 3 writes)."""
    if seconds >= 3600:
        hours, rest = divmod(round(seconds / 60), 60)
        return f"{hours}h {rest:02d}m"
    if seconds >= 60:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes}m {rest:02d}s"
    return f"{seconds:.1f}s"
