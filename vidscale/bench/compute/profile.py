"""`vidscale bench profile`: where one training step's time goes, from `torch.profiler`.

For each model, `warmup` untimed steps (cudnn autotuning, allocator warm-up) and then one
profiled step at a fixed setting. From the profiler's trace:

- the top operations by self time: kernels on CUDA, CPU operators on the CPU (an operator's
  self time is its duration less that of the operators it called);
- the share of that time in matmul / convolution work against everything else (elementwise,
  normalisation, reductions, copies: memory-bound work);
- launch gaps: the share of the step's span (first kernel start to last kernel end) in which
  the device ran nothing, and the gaps' count and mean.

`run(ProfileConfig, *, out_json, progress, device)` returns a `ProfileResult` (one
`ProfiledStep` per model), whose `to_dict()` is the JSON it writes and which
`ProfileResult.read` parses back (`bench gpu-report` reads it so).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from vidscale.bench import options
from vidscale.bench.compute.train_step import (
    StepShape,
    check_trainable,
    release,
    train_subject,
)
from vidscale.bench.options import option
from vidscale.bench.results import (
    DEFAULT_SOURCE,
    Fields,
    HostInfo,
    fields_of,
    read_json,
    write_result,
)
from vidscale.errors import InputError
from vidscale.fastpath import hardware
from vidscale.fastpath.settings import Candidate
from vidscale.models.registry import list_models

# Kernel and operator names of matmul / convolution work (cuBLAS, cuDNN, CUTLASS, oneDNN, aten).
COMPUTE_BOUND = re.compile(
    r"gemm|conv|cutlass|xmma|cudnn|matmul|wgrad|dgrad|fprop|implicit|mkldnn|"
    r"aten::(mm|addmm|bmm|baddbmm|linear)\b|sm\d\d_",
    re.IGNORECASE,
)
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
WHAT = "`vidscale bench profile`"


def profile_step(
    shape: StepShape,
    *,
    device: torch.device,
    setting: Candidate,
    warmup: int = 2,
    top: int = 15,
) -> dict[str, Any]:
    """One profiled training step of `shape`'s model; its summary (see the module's doc)."""
    step = train_subject(shape, device=device, setting=setting)
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


@dataclass(frozen=True)
class ProfileConfig:
    """What `bench profile` runs (`run`): one profiled training step of each of `models` on
    `batch` clips of `frames` (0: each model's own) x `size`² at the fast-path `setting`,
    after `warmup` untimed steps, listing the `top` operations by self time. Each field but
    `models` (the positional MODELS) is a flag (`bench.options`)."""

    models: tuple[str, ...]
    batch: int = options.batch(8)
    size: int = options.size()
    frames: int = options.frames(0)
    setting: str = options.fast_path()
    warmup: int = options.warmup(2)
    top: int = option(15, help="operations listed, by self time", low=1, flag="topk")

    def validate(self) -> None:
        """Raise `InputError` naming the first flag or model that cannot work."""
        options.check_options(self)
        known = set(list_models())
        for name in self.models:
            if name not in known:
                raise InputError(f"unknown model {name!r}; see `vidscale models`")
            shape = StepShape(name, self.batch, self.size, self.frames)
            check_trainable(name, frames=shape.clip_frames, size=self.size, batch=self.batch)


@dataclass(frozen=True)
class TopOperation:
    """An operation (kernel or operator) by self time: its total in µs, share of the step's,
    calls, and whether it is matmul / convolution work or memory-bound."""

    name: str
    self_us: float
    share: float
    calls: int
    kind: str

    @classmethod
    def from_fields(cls, f: Fields) -> TopOperation:
        return cls(
            name=f.text("name"),
            self_us=f.number("self_us"),
            share=f.number("share"),
            calls=f.integer("calls"),
            kind=f.text("kind"),
        )


@dataclass(frozen=True)
class ProfiledStep:
    """One model's profiled step (`profile_step`): its shape and setting, what was timed
    (`timeline`: cuda kernels or cpu operators), the top operations, the matmul/conv and
    memory-bound shares of the self time, and the idle gaps of the step's span."""

    model: str
    batch: int
    input: str
    setting: str
    timeline: str
    self_us_total: float
    top: tuple[TopOperation, ...]
    matmul_conv_share: float
    memory_bound_share: float
    span_us: float
    busy_us: float
    idle_share: float
    gaps: int
    mean_gap_us: float
    events: int

    @classmethod
    def of(cls, summary: Mapping[str, Any]) -> ProfiledStep:
        """From `profile_step`'s dict."""
        return cls.from_fields(fields_of(summary, source="profile_step", what=WHAT))

    @classmethod
    def from_fields(cls, f: Fields) -> ProfiledStep:
        numbers = ("self_us_total", "matmul_conv_share", "memory_bound_share", "span_us")
        values: dict[str, Any] = {k: f.text(k) for k in ("model", "input", "setting", "timeline")}
        values |= {k: f.integer(k) for k in ("batch", "gaps", "events")}
        values |= {k: f.number(k) for k in (*numbers, "busy_us", "idle_share", "mean_gap_us")}
        values["top"] = tuple(TopOperation.from_fields(t) for t in f.objs("top"))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["top"] = [dataclasses.asdict(t) for t in self.top]
        return out


@dataclass(frozen=True)
class ProfileResult:
    """What `bench profile` measured (its `--out-json`, read back by `bench gpu-report`): the
    device, one profiled step per model, and whether the run got to its end (`complete`
    false: it stopped early; a file without the key reads as complete)."""

    hardware: HostInfo
    models: tuple[ProfiledStep, ...]
    complete: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware.to_dict(),
            "models": [m.to_dict() for m in self.models],
            "complete": self.complete,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = DEFAULT_SOURCE) -> ProfileResult:
        """Parse `to_dict()`'s document; `InputError` naming `source` and the key at fault."""
        f = fields_of(data, source=source, what=WHAT)
        return cls(
            hardware=HostInfo.from_fields(f.obj("hardware")),
            models=tuple(ProfiledStep.from_fields(m) for m in f.objs("models")),
            complete=f.flag("complete") if f.has("complete") else True,
        )

    @classmethod
    def read(cls, path: Path) -> ProfileResult:
        """The result in the JSON file at `path`; `InputError` naming the file and the key."""
        return cls.from_dict(read_json(path, what=WHAT).data, source=str(path))


def run(
    config: ProfileConfig,
    *,
    out_json: Path,
    progress: bool = False,
    device: str | torch.device = "auto",
) -> ProfileResult:
    """`profile_step` for each model on `device`; the device and one entry per model, written
    to `out_json` atomically after each model with `"complete": false` until the last, so a
    run stopped by a time limit keeps the models it profiled. `progress` names each model on
    stderr as it starts."""
    dev = hardware.resolve_device(device)
    chosen = Candidate.from_label(config.setting)
    result = ProfileResult(HostInfo.of(hardware.describe(dev)), (), complete=False)
    for name in config.models:
        if progress:
            print(f"bench profile: {name}", file=sys.stderr)
        shape = StepShape(name, config.batch, config.size, config.frames)
        step = profile_step(shape, device=dev, setting=chosen, warmup=config.warmup, top=config.top)
        result = dataclasses.replace(result, models=(*result.models, ProfiledStep.of(step)))
        write_result(out_json, result.to_dict())
    result = dataclasses.replace(result, complete=True)
    write_result(out_json, result.to_dict())
    return result


def format_profile(result: ProfileResult, *, rows: int = 8) -> str:
    """Each model's shares and gaps, then its top operations."""
    lines = []
    for m in result.models:
        lines.append(
            f"{m.model} batch {m.batch} {m.input} ({m.timeline}): matmul/conv "
            f"{m.matmul_conv_share:.0%}, memory-bound {m.memory_bound_share:.0%}, idle "
            f"{m.idle_share:.0%} in {m.gaps} gaps (mean {m.mean_gap_us:.1f} µs)"
        )
        for t in m.top[:rows]:
            lines.append(f"  {t.share:6.1%} {t.calls:5d}x  {t.kind:12}  {t.name[:90]}")
    return "\n".join(lines)
