"""`vidscale plan`: how long, how many GPUs, which model scales better (the scaling model applied).

`plan(request)` answers "how long for E epochs of N clips with this model on P GPUs of this kind
over this network"; `gpus_for_target` inverts it ("how many GPUs for a target time"); `compare`
tabulates several models over GPU counts. Inputs come from a hardware preset
(`planner/clusters.py`) and may be replaced by measurements (`PlanRequest`'s optional fields), or
read from a `vidscale bench scaling` JSON (`measured.read_measured`, then `with_measured`:
`plan --measured`). Each answer carries the largest global batch the project's recipes know to
keep accuracy
(`batch_limit`), so that a plan that needs more GPUs than the recipe's batch allows says so.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from vidscale.errors import InputError
from vidscale.models.costs import model_costs
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
from vidscale.planner.measured import Measured
from vidscale.planner.overlap import (
    Framework,
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
        raise InputError(f"--model: unknown model {req.model!r}; see `vidscale models`")
    try:
        hw = hardware(req.hardware)
    except ValueError as err:
        raise InputError(f"--hardware: {err}") from None
    if req.grad_dtype not in GRAD_BYTES:
        raise InputError(
            f"--grad-dtype: expected one of {', '.join(GRAD_BYTES)}, got {req.grad_dtype!r}"
        )
    for flag, value, low in (
        ("--world-size", req.gpus, 1),
        ("--batch-per-gpu", req.batch_per_gpu, 1),
        ("--step-time batch", req.step_time_batch, 1),
        ("--epoch-clips", req.clips, 1),
        ("--gpus-per-node", req.gpus_per_node, 1),
    ):
        if value is not None and value < low:
            raise InputError(f"{flag}: must be >= {low}, got {value}")
    for flag, number in (
        ("--epochs", req.epochs),
        ("--step-time", req.step_time),
        ("--bandwidth-gbps", req.bandwidth_gbps),
        ("--bucket-cap-mb", req.bucket_mb),
    ):
        if number is not None and not number > 0:
            raise InputError(f"{flag}: must be > 0, got {number}")
    for flag, number in (("--data-time", req.data_time), ("--latency-us", req.latency_us)):
        if number is not None and not number >= 0:
            raise InputError(f"{flag}: must be >= 0, got {number}")
    if req.step_time is None and hw.reference is None:
        raise InputError(
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
    raise InputError(
        f"--bandwidth-gbps: hardware {hw.name!r} has no network rate{why}; pass the achieved "
        "all-reduce bandwidth per node in Gb/s, or --measured with a `vidscale bench scaling` "
        "JSON of 1 and 2 processes"
    )


def nodes_for(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) for `gpus`: a partial node below one node, else whole nodes."""
    if gpus <= gpus_per_node:
        return 1, gpus
    if gpus % gpus_per_node:
        raise InputError(
            f"--world-size: {gpus} is not a whole number of {gpus_per_node}-GPU nodes "
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
        raise InputError(f"--world-size: must be >= 1, got {gpus}")
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


def with_measured(req: PlanRequest, measured: Measured, *, keep_batch: bool = False) -> PlanRequest:
    """`req` with the inputs of `measured` in the fields it leaves open (explicit values win):
    the compute (`step_time` at the measured batch, by MACs for the plan's clip) and with it
    its batch per GPU unless `keep_batch`, the data wait per clip (`data_time`), and, for a
    preset without a network rate (`local`), the multi-process run's all-reduce bandwidth.
    `from_measured` names the fields taken."""
    if req.model != measured.model:
        raise InputError(f"--measured: read for {measured.model}, the plan is of {req.model}")
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
        raise InputError(f"--target: must be > 0 s, got {target_s}")
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
