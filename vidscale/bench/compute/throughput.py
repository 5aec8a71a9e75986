"""`vidscale bench throughput`: training clips/s and model FLOP utilisation (MFU) of each model
at the batch that fills the device, eager and under `torch.compile`, at one fixed setting.

For each model: with `fill`, the batch is found by doubling from `batch` until the device runs
out of memory or `max_batch` is reached, keeping the largest that ran two steps (eager; the
compiled run uses the same batch). Each (model, compiled) pair then runs `warmup` untimed steps
(compilation and cudnn autotuning happen there; their time is `warmup_s`) and `steps` timed
ones, synchronised at the end. MFU is the step's FLOPs (3x the forward's, the TSM paper's
convention) per second over the peak: a square matmul in the setting's dtype timed in the same
run (`hardware.matmul_probe`).
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vidscale.atomic import atomic_write_json
from vidscale.bench.compute.models import check_trainable
from vidscale.bench.compute.train_step import StepShape, TrainStep, is_out_of_memory, release
from vidscale.fastpath import hardware
from vidscale.fastpath.settings import Candidate
from vidscale.models.registry import list_models

# The issue's acceptance models: TSM and TSN (the shift's cost), Table 1's I3Ds, SlowFast 8x8.
DEFAULT_MODELS = (
    "tsm_resnet50",
    "tsn_resnet50",
    "i3d_resnet50_3x1x1",
    "i3d_resnet50_3x3x3",
    "slowfast_resnet50_8x8",
)


@dataclass(frozen=True)
class ThroughputConfig:
    """What `bench_throughput` runs. `batch` is the fixed batch, or with `fill` the first one
    tried; `compile` lists the variants (False: eager, True: `torch.compile` with
    `compile_backend`, for `compile_models` only when given: compiling costs start-up time);
    `frames` 0 is each model's own clip length; `peak_size` 0 is the
    device's default peak matmul side."""

    models: tuple[str, ...] = DEFAULT_MODELS
    setting: str = "bf16+cl"
    compile: tuple[bool, ...] = (False, True)
    compile_backend: str = "inductor"
    compile_models: tuple[str, ...] = ()  # the models compiled runs are for (empty: all)
    batch: int = 8
    fill: bool = False
    max_batch: int = 256
    size: int = 224
    frames: int = 0
    num_classes: int = 400
    warmup: int = 3
    steps: int = 10
    peak_size: int = 0

    def validate(self) -> None:
        """Raise ValueError naming the first field, model or setting that cannot work."""
        checks = [
            (bool(self.models), "no models given; see `vidscale models`"),
            (bool(self.compile), "compile must list at least one variant"),
            (self.batch >= 1, "batch must be >= 1"),
            (self.max_batch >= self.batch, "max_batch must be >= batch"),
            (self.size >= 32, "size must be >= 32 (the trunk's total stride)"),
            (self.frames >= 0, "frames must be >= 0 (0: each model's own)"),
            (self.num_classes >= 1, "num_classes must be >= 1"),
            (self.warmup >= 1, "warmup must be >= 1 (the first step compiles and autotunes)"),
            (self.steps >= 1, "steps must be >= 1"),
            (self.peak_size >= 0, "peak_size must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        Candidate.from_label(self.setting)
        known = set(list_models())
        for name in self.models:
            if name not in known:
                raise ValueError(f"unknown model {name!r}; see `vidscale models`")
        for name in self.compile_models:
            if name not in self.models:
                raise ValueError(f"compile_models: {name!r} is not among the models")
        if len(set(self.models)) != len(self.models):
            raise ValueError("a model is listed more than once")
        for name in self.models:
            shape = StepShape(name, self.batch, self.size, self.frames, self.num_classes)
            check_trainable(name, frames=shape.clip_frames, size=self.size, batch=self.batch)


def fill_batch(
    run: Callable[[int], None], *, start: int, cap: int
) -> tuple[int, list[dict[str, Any]]]:
    """The largest batch in start, 2·start, 4·start, ... ≤ cap for which `run(batch)` does not
    run out of memory, and every trial as {"batch", "fits"}. Raises ValueError when even
    `start` does not fit; other errors propagate."""
    trials: list[dict[str, Any]] = []
    best = 0
    batch = start
    while batch <= cap:
        try:
            run(batch)
        except (RuntimeError, MemoryError) as err:
            if not is_out_of_memory(err) and not isinstance(err, MemoryError):
                raise
            trials.append({"batch": batch, "fits": False})
            break
        trials.append({"batch": batch, "fits": True})
        best = batch
        batch *= 2
    if best == 0:
        raise ValueError(f"batch {start} does not fit in the device's memory")
    return best, trials


def bench_throughput(
    cfg: ThroughputConfig,
    *,
    device: str | torch.device = "auto",
    out_json: Path | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """One row per (model, compiled) and the measured peak; written to `out_json` if given.

    Every model's batch and eager row come first, the compiled rows last (compiling costs
    start-up time), and `out_json` is rewritten after each row with `"complete": false` until
    the last: a run stopped by a time limit keeps what it measured, losing compiled rows first.
    """
    cfg.validate()
    dev = hardware.resolve_device(device)
    setting = Candidate.from_label(cfg.setting)
    result: dict[str, Any] = {
        "hardware": hardware.describe(dev),
        "settings": dataclasses.asdict(cfg),
        "peak_flops_per_s": measure_peak(dev, bf16=setting.bf16, size=cfg.peak_size),
        "rows": [],
        "complete": False,
    }

    def add(name: str, compiled: bool, batch: int, trials: list[dict[str, Any]]) -> None:
        peak = result["peak_flops_per_s"]
        row = measure(name, batch, cfg, dev, setting, compiled=compiled, peak=peak)
        result["rows"].append(row | {"fill_trials": trials})
        if out_json is not None:
            atomic_write_json(Path(out_json), result)
        if progress:
            print(_describe(row), file=sys.stderr)

    batches = {}
    for name in cfg.models:
        batches[name] = _batch_for(name, cfg, dev, setting)
        if False in cfg.compile:
            add(name, False, *batches[name])
    if True in cfg.compile:
        for name in cfg.models:
            if not cfg.compile_models or name in cfg.compile_models:
                add(name, True, *batches[name])
    result["complete"] = True
    if out_json is not None:
        atomic_write_json(Path(out_json), result)
    return result


def _batch_for(
    name: str, cfg: ThroughputConfig, device: torch.device, setting: Candidate
) -> tuple[int, list[dict[str, Any]]]:
    """`cfg.batch`, or with `cfg.fill` the batch that fills the device and its trials."""
    if not cfg.fill:
        return cfg.batch, []
    found = fill_batch(
        functools.partial(_two_steps, name, cfg=cfg, device=device, setting=setting),
        start=cfg.batch,
        cap=cfg.max_batch,
    )
    release(device)  # what the failed trial held, now that its error is gone
    return found


def measure_peak(device: torch.device, *, bf16: bool, size: int, repeats: int = 10) -> float:
    """FLOP/s of a square matmul in bf16 (or float32) on `device`: the median of `repeats`."""
    side = size or hardware.DEFAULT_PEAK_SIZE.get(device.type, 2048)
    dtype = torch.bfloat16 if bf16 else torch.float32
    call, flops = hardware.matmul_probe(device, dtype=dtype, size=side)
    call()
    seconds = []
    for _ in range(repeats):
        hardware.synchronize(device)
        start = time.perf_counter()
        call()
        hardware.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return flops / statistics.median(seconds)


def measure(
    name: str,
    batch: int,
    cfg: ThroughputConfig,
    device: torch.device,
    setting: Candidate,
    *,
    compiled: bool,
    peak: float,
) -> dict[str, Any]:
    """`warmup` + `steps` training steps of `name` at `batch`; its row."""
    shape = StepShape(name, batch, cfg.size, cfg.frames, cfg.num_classes)
    backend = cfg.compile_backend if compiled else None
    step = TrainStep(shape, device=device, setting=setting, compile_backend=backend)
    start = time.perf_counter()
    for _ in range(cfg.warmup):
        step()
    hardware.synchronize(device)
    timed = time.perf_counter()
    for _ in range(cfg.steps):
        step()
    hardware.synchronize(device)
    end = time.perf_counter()
    memory = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    del step
    release(device)
    step_s = (end - timed) / cfg.steps
    flops_per_s = shape.train_flops_per_clip() * batch / step_s
    return {
        "model": name,
        "compiled": compiled,
        "setting": cfg.setting,
        "batch": batch,
        "input": shape.input,
        "train_flops_per_clip": shape.train_flops_per_clip(),
        "warmup_s": timed - start,
        "step_s": step_s,
        "clips_per_s": batch / step_s,
        "train_flops_per_s": flops_per_s,
        "mfu": flops_per_s / peak,
        "peak_memory_bytes": memory,
    }


def _two_steps(
    name: str, batch: int, *, cfg: ThroughputConfig, device: torch.device, setting: Candidate
) -> None:
    shape = StepShape(name, batch, cfg.size, cfg.frames, cfg.num_classes)
    try:
        step = TrainStep(shape, device=device, setting=setting)
        step()
        step()
        hardware.synchronize(device)
        del step
    finally:
        release(device)


def _describe(row: dict[str, Any]) -> str:
    variant = "compiled" if row["compiled"] else "eager"
    return (
        f"bench throughput: {row['model']} {variant} batch {row['batch']}: "
        f"{row['clips_per_s']:.1f} clips/s, MFU {row['mfu']:.1%}"
    )


def format_table(result: dict[str, Any]) -> str:
    """The rows as a plain-text table."""
    lines = [
        f"peak {result['peak_flops_per_s'] / 1e12:.1f} TFLOP/s ({result['settings']['setting']})",
        f"{'model':24} {'variant':9} {'batch':>5} {'step ms':>8} {'clips/s':>8} {'MFU':>6}",
    ]
    for r in result["rows"]:
        variant = "compiled" if r["compiled"] else "eager"
        lines.append(
            f"{r['model']:24} {variant:9} {r['batch']:5d} {1e3 * r['step_s']:8.1f} "
            f"{r['clips_per_s']:8.1f} {r['mfu']:6.1%}"
        )
    return "\n".join(lines)
