"""`vidscale bench profile`: where one training step's time goes, from `torch.profiler`.

For each model, `warmup` untimed steps (cudnn autotuning, allocator warm-up) and then one
profiled step at a fixed setting. From the profiler's trace:

- the top operations by self time: kernels on CUDA, CPU operators on the CPU (an operator's
  self time is its duration less that of the operators it called);
- the share of that time in matmul / convolution work against everything else (elementwise,
  normalisation, reductions, copies: memory-bound work);
- launch gaps: the share of the step's span (first kernel start to last kernel end) in which
  the device ran nothing, and the gaps' count and mean.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from vidscale.atomic import atomic_write_json
from vidscale.bench.compute.train_step import StepShape, TrainStep, release
from vidscale.fastpath import hardware
from vidscale.fastpath.settings import Candidate

# Kernel and operator names of matmul / convolution work (cuBLAS, cuDNN, CUTLASS, oneDNN, aten).
COMPUTE_BOUND = re.compile(
    r"gemm|conv|cutlass|xmma|cudnn|matmul|wgrad|dgrad|fprop|implicit|mkldnn|"
    r"aten::(mm|addmm|bmm|baddbmm|linear)\b|sm\d\d_",
    re.IGNORECASE,
)
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def profile_step(
    shape: StepShape,
    *,
    device: torch.device,
    setting: Candidate,
    warmup: int = 2,
    top: int = 15,
) -> dict[str, Any]:
    """One profiled training step of `shape`'s model; its summary (see the module's doc)."""
    step = TrainStep(shape, device=device, setting=setting)
    for _ in range(warmup):
        step()
    hardware.synchronize(device)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        with profile(activities=activities) as prof:
            step()
            hardware.synchronize(device)
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    del step
    release(device)
    on_device = device.type == "cuda"
    spans = [e for e in events if _is_work(e, on_device=on_device)]
    if not spans:
        raise RuntimeError(f"the profiler recorded no {'kernels' if on_device else 'operators'}")
    summary = summarise(spans, nested=not on_device, top=top)
    return {
        "model": shape.model,
        "batch": shape.batch,
        "input": shape.input,
        "setting": setting.label,
        "timeline": "cuda kernels" if on_device else "cpu operators",
        **summary,
    }


def _is_work(event: dict[str, Any], *, on_device: bool) -> bool:
    if event.get("ph") != "X" or "dur" not in event:
        return False
    category = str(event.get("cat", "")).lower()
    return category in DEVICE_CATEGORIES if on_device else category == "cpu_op"


def summarise(spans: Sequence[dict[str, Any]], *, nested: bool, top: int) -> dict[str, Any]:
    """Top names by self time, the compute-bound share and the idle gaps of `spans` (trace
    events with "name", "ts", "dur" in µs; `nested`: CPU operators that contain the ones they
    call, per thread)."""
    selfs = self_times(spans) if nested else [float(e["dur"]) for e in spans]
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event, own in zip(spans, selfs, strict=True):
        by_name[event["name"]][0] += own
        by_name[event["name"]][1] += 1
    total = sum(selfs) or 1.0
    ranked = sorted(by_name.items(), key=lambda item: -item[1][0])
    compute = sum(t for name, (t, _) in by_name.items() if COMPUTE_BOUND.search(name))
    return {
        "self_us_total": total,
        "top": [
            {
                "name": name,
                "self_us": t,
                "share": t / total,
                "calls": int(n),
                "kind": "matmul/conv" if COMPUTE_BOUND.search(name) else "memory-bound",
            }
            for name, (t, n) in ranked[:top]
        ],
        "matmul_conv_share": compute / total,
        "memory_bound_share": 1 - compute / total,
        **idle_gaps(spans),
    }


def self_times(spans: Sequence[dict[str, Any]]) -> list[float]:
    """Each span's duration less its direct children's, children being the spans of the same
    thread that lie inside it."""
    own = [float(e["dur"]) for e in spans]
    by_thread: dict[Any, list[int]] = defaultdict(list)
    for i, e in enumerate(spans):
        by_thread[(e.get("pid"), e.get("tid"))].append(i)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (float(spans[i]["ts"]), -float(spans[i]["dur"])))
        stack: list[int] = []
        for i in indices:
            start = float(spans[i]["ts"])
            while stack and start >= _end(spans[stack[-1]]):
                stack.pop()
            if stack:
                own[stack[-1]] -= float(spans[i]["dur"])
            stack.append(i)
    return [max(t, 0.0) for t in own]


def idle_gaps(spans: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The span from the first start to the last end, the share of it covered by no span,
    and the gaps between covered stretches (count, mean µs)."""
    intervals = sorted((float(e["ts"]), _end(e)) for e in spans)
    busy, gaps = 0.0, []
    current_start, current_end = intervals[0]
    for start, end in intervals[1:]:
        if start > current_end:
            busy += current_end - current_start
            gaps.append(start - current_end)
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    busy += current_end - current_start
    window = intervals[-1][1] if len(intervals) == 1 else max(e for _, e in intervals)
    window -= intervals[0][0]
    return {
        "span_us": window,
        "busy_us": busy,
        "idle_share": 1 - busy / window if window > 0 else 0.0,
        "gaps": len(gaps),
        "mean_gap_us": sum(gaps) / len(gaps) if gaps else 0.0,
        "events": len(spans),
    }


def _end(event: dict[str, Any]) -> float:
    return float(event["ts"]) + float(event["dur"])


def bench_profile(
    models: Sequence[str],
    *,
    batch: int,
    size: int = 224,
    frames: int = 0,
    setting: str = "bf16+cl",
    warmup: int = 2,
    top: int = 15,
    device: str | torch.device = "auto",
    out_json: Path | None = None,
) -> dict[str, Any]:
    """`profile_step` for each model; the device, and one entry per model. `out_json` is
    rewritten after each model with `"complete": false` until the last, so a run stopped by a
    time limit keeps the models it profiled."""
    dev = hardware.resolve_device(device)
    chosen = Candidate.from_label(setting)
    result: dict[str, Any] = {"hardware": hardware.describe(dev), "models": [], "complete": False}
    for name in models:
        shape = StepShape(name, batch, size, frames)
        result["models"].append(
            profile_step(shape, device=dev, setting=chosen, warmup=warmup, top=top)
        )
        if out_json is not None:
            atomic_write_json(Path(out_json), result)
    result["complete"] = True
    if out_json is not None:
        atomic_write_json(Path(out_json), result)
    return result


def format_profile(result: dict[str, Any], *, rows: int = 8) -> str:
    """Each model's shares and gaps, then its top operations."""
    lines = []
    for m in result["models"]:
        lines.append(
            f"{m['model']} batch {m['batch']} {m['input']} ({m['timeline']}): matmul/conv "
            f"{m['matmul_conv_share']:.0%}, memory-bound {m['memory_bound_share']:.0%}, idle "
            f"{m['idle_share']:.0%} in {m['gaps']} gaps (mean {m['mean_gap_us']:.1f} µs)"
        )
        for t in m["top"][:rows]:
            lines.append(f"  {t['share']:6.1%} {t['calls']:5d}x  {t['kind']:12}  {t['name'][:90]}")
    return "\n".join(lines)
