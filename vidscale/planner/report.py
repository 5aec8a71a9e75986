"""Text and JSON of `vidscale plan`'s answers (`planner/capacity.py` computes them)."""

from __future__ import annotations

from typing import Any

from vidscale.planner.capacity import PlanResult, TargetResult
from vidscale.planner.durations import format_duration
from vidscale.planner.measured import Measured


def _header(result: PlanResult) -> str:
    s, p = result.setup, result.prediction
    framework = "Horovod fusion" if s.cluster.bucketing.framework == "horovod" else "DDP buckets"
    units = "GPUs" if s.hw.device == "gpu" else ("process" if p.gpus == 1 else "processes")
    return (
        f"{s.request.model} on {p.gpus:,} {units} of {s.hw.name} ({p.nodes} node(s) x "
        f"{s.cluster.gpus_per_node} {s.hw.gpu}), ring all-reduce, {framework} "
        f"{s.cluster.bucketing.bucket_mb:g} MiB"
    )


def format_overlap(measured: Measured) -> str:
    """The measured share of the all-reduce hidden under backward, next to the overlap
    model's for the same run (or why the file has none)."""
    o = measured.overlap
    if o is None:
        return f"not measured: {measured.no_overlap}"
    return (
        f"measured {100 * o.hidden:.1f}% of the all-reduce hidden under backward "
        f"({1e3 * o.exposed_s:.1f} of {1e3 * o.in_flight_s:.1f} ms exposed; {measured.path}, "
        f"run {o.label}); the overlap model predicts {100 * o.predicted_hidden:.1f}% "
        f"({1e3 * o.predicted_exposed_s:.1f} ms exposed) for that run: backward 2/3 of its "
        f"{o.compute_s:.3f} s compute, {o.buckets} DDP bucket(s) of {o.bucket_mb:g} MiB at the "
        "measured all-reduce speed"
    )


def _accuracy(result: PlanResult) -> str:
    if result.limit is None:
        return "no accuracy evidence for this model in the project's recipes"
    verdict = "within it" if result.batch_ok else "ABOVE it: expect lower accuracy"
    return (
        f"largest global batch known to keep accuracy {result.limit.keeps:,} "
        f"({result.limit.source}); this plan's {result.prediction.global_batch:,} is {verdict}"
    )


def format_plan(result: PlanResult) -> str:
    s, p = result.setup, result.prediction
    step, req = p.step, s.request
    mb = s.work.model_bytes / 1e6
    unit = "process" if s.hw.device == "cpu" else "GPU"
    lines = [
        _header(result),
        f"  batch          {p.batch_per_gpu} clips per {unit} -> global batch {p.global_batch:,}",
        f"  step           {step.total_s:.3f} s = compute {step.compute_s:.3f} + exposed "
        f"all-reduce {step.comm_s:.3f} + exposed data {step.data_s:.3f} "
        f"(whole all-reduce if unhidden: {step.allreduce_s:.3f} s for {mb:.1f} MB of "
        f"{req.grad_dtype} gradients)",
        f"  speed          {p.clips_per_s:,.1f} clips/s",
        f"  time to train  {format_duration(p.train_s)} for {req.epochs:g} epochs of "
        f"{req.clips:,} clips",
        f"  efficiency     {100 * p.efficiency:.1f}% of one node's speed x {p.nodes} "
        f"(one node: {p.one_node_clips_per_s:,.1f} clips/s)",
        f"  bottleneck     {p.bottleneck}",
        f"  accuracy       {_accuracy(result)}",
    ]
    if req.measured is not None:
        lines.append(f"  overlap        {format_overlap(req.measured)}")
    lines += [f"  assumption     {note}" for note in s.notes]
    return "\n".join(lines)


def format_table(results: list[PlanResult]) -> str:
    """One row per (model, GPU count): time, speed, efficiency, bottleneck, batch check."""
    head = (
        f"{'model':22s} {'GPUs':>6} {'batch':>7} {'step s':>7} {'comm ms':>8} {'clips/s':>10} "
        f"{'time':>9} {'eff':>6} {'bottleneck':>10}  accuracy"
    )
    lines = [head]
    for r in results:
        p = r.prediction
        ok = "?" if r.batch_ok is None else ("ok" if r.batch_ok else "too large")
        lines.append(
            f"{r.setup.request.model:22s} {p.gpus:6,d} {p.global_batch:7,d} "
            f"{p.step.total_s:7.3f} {1e3 * p.step.comm_s:8.1f} {p.clips_per_s:10,.1f} "
            f"{format_duration(p.train_s):>9} {100 * p.efficiency:5.1f}% {p.bottleneck:>10}  {ok}"
        )
    measured = dict.fromkeys(
        r.setup.request.measured for r in results if r.setup.request.measured is not None
    )
    lines += [f"  overlap     {m.model}: {format_overlap(m)}" for m in measured]
    notes = dict.fromkeys(f"{r.setup.request.model}: {n}" for r in results for n in r.setup.notes)
    lines += [f"  assumption  {note}" for note in notes]
    return "\n".join(lines)


def format_target(result: TargetResult) -> str:
    target = format_duration(result.target_s)
    if result.result is None:
        best = result.best.prediction
        return (
            f"no GPU count reaches {target}: the fastest found is "
            f"{format_duration(best.train_s)} on {best.gpus:,} GPUs\n{format_plan(result.best)}"
        )
    gpus = result.result.prediction.gpus
    return f"{gpus:,} GPUs train within {target}:\n{format_plan(result.result)}"


def plan_as_dict(result: PlanResult) -> dict[str, Any]:
    s, p = result.setup, result.prediction
    return {
        "model": s.request.model,
        "hardware": s.hw.name,
        "gpus": p.gpus,
        "nodes": p.nodes,
        "gpus_per_node": s.cluster.gpus_per_node,
        "batch_per_gpu": p.batch_per_gpu,
        "global_batch": p.global_batch,
        "framework": s.cluster.bucketing.framework,
        "bucket_mb": s.cluster.bucketing.bucket_mb,
        "grad_dtype": s.request.grad_dtype,
        "gradient_bytes": s.work.model_bytes,
        "step_s": p.step.total_s,
        "compute_s": p.step.compute_s,
        "comm_exposed_s": p.step.comm_s,
        "data_exposed_s": p.step.data_s,
        "allreduce_unhidden_s": p.step.allreduce_s,
        "clips_per_s": p.clips_per_s,
        "one_node_clips_per_s": p.one_node_clips_per_s,
        "efficiency": p.efficiency,
        "epochs": s.request.epochs,
        "clips": s.request.clips,
        "train_s": p.train_s,
        "train": format_duration(p.train_s),
        "bottleneck": p.bottleneck,
        "batch_limit": None if result.limit is None else result.limit.keeps,
        "batch_limit_source": None if result.limit is None else result.limit.source,
        "batch_ok": result.batch_ok,
        "assumptions": list(s.notes),
        "measured": None if s.request.measured is None else measured_as_dict(s.request.measured),
    }


def measured_as_dict(measured: Measured) -> dict[str, Any]:
    """The inputs `--measured` read, and the overlap check (None without a multi-process
    plain-DDP run)."""
    o = measured.overlap
    return {
        "file": str(measured.path),
        "model": measured.model,
        "run": measured.label,
        "device": measured.device,
        "device_name": measured.device_name,
        "threads": measured.threads,
        "batch_per_process": measured.batch,
        "frames": measured.frames,
        "size": measured.size,
        "compute_s": measured.compute_s,
        "compute_clip_s": measured.clip_s,
        "data_wait_s": measured.data_wait_s,
        "data_wait_clip_s": measured.data_clip_s,
        "overlap": None
        if o is None
        else {
            "run": o.label,
            "procs": o.procs,
            "compute_s": o.compute_s,
            "allreduce_in_flight_s": o.in_flight_s,
            "allreduce_exposed_s": o.exposed_s,
            "allreduce_bytes": o.nbytes,
            "bandwidth_gbps": o.bandwidth_gbps,
            "hidden": o.hidden,
            "model_exposed_s": o.predicted_exposed_s,
            "model_hidden": o.predicted_hidden,
            "buckets": o.buckets,
            "bucket_mb": o.bucket_mb,
        },
        "no_overlap": measured.no_overlap if o is None else None,
    }


def target_as_dict(result: TargetResult) -> dict[str, Any]:
    return {
        "target_s": result.target_s,
        "reached": result.result is not None,
        "plan": plan_as_dict(result.result or result.best),
    }
