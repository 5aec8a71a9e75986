"""`vidscale bench throughput`: training clips/s and model FLOP utilisation (MFU) of each model
at the batch that fills the device, eager and under `torch.compile`, at one fixed setting.

For each model: with `fill`, the batch is found by doubling from `batch` until the device runs
out of memory or `max_batch` is reached, keeping the largest that ran two steps (eager; the
compiled run uses the same batch). Each (model, compiled) pair then runs `warmup` untimed steps
(compilation and cudnn autotuning happen there; their time is `warmup_s`) and `steps` timed
ones, synchronised at the end. MFU is the step's FLOPs (3x the forward's, the TSM paper's
convention) per second over the peak: a square matmul in the setting's dtype timed in the same
run (`hardware.matmul_probe`).

`run(ThroughputConfig, *, out_json, progress, device)` returns a `ThroughputResult` (one
`ThroughputRow` per (model, compiled)), whose `to_dict()` is the JSON it writes and which
`ThroughputResult.read` parses back (`bench gpu-report` reads it so).
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vidscale.bench import options
from vidscale.bench.compute.train_step import (
    StepShape,
    check_trainable,
    is_out_of_memory,
    release,
    train_subject,
)
from vidscale.bench.options import option
from vidscale.bench.results import (
    DEFAULT_SOURCE,
    Fields,
    HostInfo,
    fields_of,
    plain,
    read_json,
    write_result,
)
from vidscale.errors import InputError
from vidscale.fastpath import hardware
from vidscale.fastpath.settings import Candidate
from vidscale.models.registry import list_models

WHAT = "`vidscale bench throughput`"

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
    """What `bench throughput` runs (`run`). `batch` is the fixed batch, or with `fill` the first one
    tried; `compile` lists the variants (False: eager, True: `torch.compile` with
    `compile_backend`, for `compile_models` only when given: compiling costs start-up time);
    `frames` 0 is each model's own clip length; `peak_size` 0 is the
    device's default peak matmul side. Each field but `models` and `compile` is a flag of
    `bench throughput` (`bench.options`)."""

    models: tuple[str, ...] = DEFAULT_MODELS
    setting: str = options.fast_path()
    compile: tuple[bool, ...] = (False, True)
    compile_backend: str = option("inductor", help="torch.compile backend")
    compile_models: tuple[str, ...] = option(
        (), help="compile these models only (none: all)", flag="compile-only"
    )
    batch: int = options.batch(8, help="the batch, or with --fill-batch the first tried")
    fill: bool = option(False, help="double the batch until out of memory", flag="fill-batch")
    max_batch: int = option(256, help="cap of --fill-batch", low=1)
    size: int = options.size()
    frames: int = options.frames(0)
    num_classes: int = options.num_classes()
    warmup: int = options.warmup(
        3, low=1, help="untimed steps first (>= 1: the first compiles and autotunes)"
    )
    steps: int = options.steps(10)
    peak_size: int = options.peak_size()

    def validate(self) -> None:
        """Raise `InputError` naming the first flag, model or setting that cannot work."""
        options.check_options(self)
        if not self.models:
            raise InputError("no models given; see `vidscale models`")
        if not self.compile:
            raise InputError("compile must list at least one variant")
        if self.fill and self.max_batch < self.batch:
            raise InputError(
                f"--max-batch: must be >= --batch ({self.batch}), got {self.max_batch}"
            )
        known = set(list_models())
        for name in self.models:
            if name not in known:
                raise InputError(f"unknown model {name!r}; see `vidscale models`")
        for name in self.compile_models:
            if name not in self.models:
                raise InputError(f"--compile-only: {name!r} is not among the models")
        if len(set(self.models)) != len(self.models):
            raise InputError("a model is listed more than once")
        for name in self.models:
            shape = StepShape(name, self.batch, self.size, self.frames, self.num_classes)
            check_trainable(name, frames=shape.clip_frames, size=self.size, batch=self.batch)


@dataclass(frozen=True)
class FillTrial:
    """One batch `fill_batch` tried, and whether two steps of it fit in memory."""

    batch: int
    fits: bool

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "fits": self.fits}


@dataclass(frozen=True)
class ThroughputRow:
    """One (model, compiled) measurement: `steps` timed training steps of `batch` clips of
    `input` (T x C x H x W) at `setting`, after `warmup` untimed ones that took `warmup_s`
    (compilation and autotuning included); the step's FLOPs per clip (3x the forward's), the
    step time, clips/s, FLOP/s and MFU (over the run's measured peak), the device's peak
    memory (None on the CPU), and the batches tried when filling the device."""

    model: str
    compiled: bool
    setting: str
    batch: int
    input: str
    train_flops_per_clip: int
    warmup_s: float
    step_s: float
    clips_per_s: float
    train_flops_per_s: float
    mfu: float
    peak_memory_bytes: int | None
    fill_trials: tuple[FillTrial, ...] = ()
    # Of the warm-up and timed steps, those that applied their update (`Subject.applied`; a
    # row with none is refused); None in files written before it was counted.
    steps_applied: int | None = None

    @property
    def variant(self) -> str:
        return "compiled" if self.compiled else "eager"

    @classmethod
    def from_fields(cls, f: Fields) -> ThroughputRow:
        return cls(
            model=f.text("model"),
            compiled=f.flag("compiled"),
            setting=f.text("setting"),
            batch=f.integer("batch"),
            input=f.text("input"),
            train_flops_per_clip=f.integer("train_flops_per_clip"),
            warmup_s=f.number("warmup_s"),
            step_s=f.number("step_s"),
            clips_per_s=f.number("clips_per_s"),
            train_flops_per_s=f.number("train_flops_per_s"),
            mfu=f.number("mfu"),
            peak_memory_bytes=f.opt_integer("peak_memory_bytes"),
            fill_trials=tuple(
                FillTrial(t.integer("batch"), t.flag("fits")) for t in f.objs("fill_trials")
            ),
            steps_applied=f.opt_integer("steps_applied") if "steps_applied" in f.data else None,
        )

    def to_dict(self) -> dict[str, Any]:
        out = {k.name: getattr(self, k.name) for k in dataclasses.fields(self)}
        return out | {"fill_trials": [t.to_dict() for t in self.fill_trials]}


_SETTING_TYPES = {
    "models": "texts",
    "setting": "text",
    "compile": "flags",
    "compile_backend": "text",
    "compile_models": "texts",
    "batch": "integer",
    "fill": "flag",
    "max_batch": "integer",
    "size": "integer",
    "frames": "integer",
    "num_classes": "integer",
    "warmup": "integer",
    "steps": "integer",
    "peak_size": "integer",
}


@dataclass(frozen=True)
class ThroughputResult:
    """What `bench throughput` measured (its `--out-json`, read back by `bench gpu-report`):
    the device, the settings, the peak matmul FLOP/s measured in the run, one row per (model,
    compiled), and whether the run got to its end (`complete` false: it stopped early and the
    rows are those measured until then; a file without the key reads as complete)."""

    hardware: HostInfo
    settings: ThroughputConfig
    peak_flops_per_s: float
    rows: tuple[ThroughputRow, ...]
    complete: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware.to_dict(),
            "settings": plain(dataclasses.asdict(self.settings)),
            "peak_flops_per_s": self.peak_flops_per_s,
            "rows": [r.to_dict() for r in self.rows],
            "complete": self.complete,
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, source: str = DEFAULT_SOURCE
    ) -> ThroughputResult:
        """Parse `to_dict()`'s document; `InputError` naming `source` and the key at fault."""
        f = fields_of(data, source=source, what=WHAT)
        s = f.obj("settings")
        return cls(
            hardware=HostInfo.from_fields(f.obj("hardware")),
            settings=ThroughputConfig(**{k: getattr(s, t)(k) for k, t in _SETTING_TYPES.items()}),
            peak_flops_per_s=f.number("peak_flops_per_s"),
            rows=tuple(ThroughputRow.from_fields(r) for r in f.objs("rows")),
            complete=f.flag("complete") if f.has("complete") else True,
        )

    @classmethod
    def read(cls, path: Path) -> ThroughputResult:
        """The result in the JSON file at `path`; `InputError` naming the file and the key."""
        return cls.from_dict(read_json(path, what=WHAT).data, source=str(path))

    def rate(self, model: str, *, compiled: bool | None = None) -> float | None:
        """clips/s of `model`: its eager or compiled row, or (None) the better of the two;
        None when the run has no such row."""
        rates = [
            r.clips_per_s
            for r in self.rows
            if r.model == model and (compiled is None or r.compiled == compiled)
        ]
        return max(rates) if rates else None


def fill_batch(run: Callable[[int], None], *, start: int, cap: int) -> tuple[int, list[FillTrial]]:
    """The largest batch in start, 2·start, 4·start, ... ≤ cap for which `run(batch)` does not
    run out of memory, and every trial. Raises `InputError` naming `--batch` when even `start`
    does not fit (the user's batch is too large for the device); other errors propagate."""
    trials: list[FillTrial] = []
    best = 0
    batch = start
    while batch <= cap:
        try:
            run(batch)
        except (RuntimeError, MemoryError) as err:
            if not is_out_of_memory(err) and not isinstance(err, MemoryError):
                raise
            trials.append(FillTrial(batch, False))
            break
        trials.append(FillTrial(batch, True))
        best = batch
        batch *= 2
    if best == 0:
        raise InputError(f"--batch {start} does not fit in the device's memory")
    return best, trials


def run(
    config: ThroughputConfig,
    *,
    out_json: Path,
    progress: bool = False,
    device: str | torch.device = "auto",
) -> ThroughputResult:
    """One row per (model, compiled) and the measured peak on `device`, written to `out_json`
    atomically. Raises `InputError` for a config that cannot work (`ThroughputConfig.validate`)
    or a first batch that does not fit.

    Every model's batch and eager row come first, the compiled rows last (compiling costs
    start-up time), and `out_json` is rewritten after each row with `"complete": false` until
    the last: a run stopped by a time limit keeps what it measured, losing compiled rows first.
    `progress` prints each row on stderr.
    """
    cfg = config
    cfg.validate()
    dev = hardware.resolve_device(device)
    setting = Candidate.from_label(cfg.setting)
    peak = measure_peak(dev, bf16=setting.bf16, size=cfg.peak_size)
    result = ThroughputResult(HostInfo.of(hardware.describe(dev)), cfg, peak, (), False)

    def add(name: str, compiled: bool, batch: int, trials: list[FillTrial]) -> None:
        nonlocal result
        row = measure(name, batch, cfg, dev, setting, compiled=compiled, peak=peak)
        row = dataclasses.replace(row, fill_trials=tuple(trials))
        result = dataclasses.replace(result, rows=(*result.rows, row))
        write_result(out_json, result.to_dict())
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
    result = dataclasses.replace(result, complete=True)
    write_result(out_json, result.to_dict())
    return result


def _batch_for(
    name: str, cfg: ThroughputConfig, device: torch.device, setting: Candidate
) -> tuple[int, list[FillTrial]]:
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
) -> ThroughputRow:
    """`warmup` + `steps` training steps of `name` at `batch`; its row (no fill trials)."""
    shape = StepShape(name, batch, cfg.size, cfg.frames, cfg.num_classes)
    backend = cfg.compile_backend if compiled else None
    step = train_subject(shape, device=device, setting=setting, compile_backend=backend)
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
    applied = step.applied
    del step
    release(device)
    applied.check(f"{name} {'compiled' if compiled else 'eager'} batch {batch} ({cfg.setting})")
    step_s = (end - timed) / cfg.steps
    flops_per_s = shape.train_flops_per_clip() * batch / step_s
    return ThroughputRow(
        model=name,
        compiled=compiled,
        setting=cfg.setting,
        batch=batch,
        input=shape.input,
        train_flops_per_clip=shape.train_flops_per_clip(),
        warmup_s=timed - start,
        step_s=step_s,
        clips_per_s=batch / step_s,
        train_flops_per_s=flops_per_s,
        mfu=flops_per_s / peak,
        peak_memory_bytes=memory,
        steps_applied=applied.applied,
    )


def _two_steps(
    name: str, batch: int, *, cfg: ThroughputConfig, device: torch.device, setting: Candidate
) -> None:
    shape = StepShape(name, batch, cfg.size, cfg.frames, cfg.num_classes)
    try:
        step = train_subject(shape, device=device, setting=setting)
        step()
        step()
        hardware.synchronize(device)
        del step
    finally:
        release(device)


def _describe(row: ThroughputRow) -> str:
    return (
        f"bench throughput: {row.model} {row.variant} batch {row.batch}: "
        f"{row.clips_per_s:.1f} clips/s, MFU {row.mfu:.1%}"
    )


def format_table(result: ThroughputResult) -> str:
    """The rows as a plain-text table."""
    lines = [
        f"peak {result.peak_flops_per_s / 1e12:.1f} TFLOP/s ({result.settings.setting})",
        f"{'model':24} {'variant':9} {'batch':>5} {'step ms':>8} {'clips/s':>8} {'MFU':>6}",
    ]
    for r in result.rows:
        lines.append(
            f"{r.model:24} {r.variant:9} {r.batch:5d} {1e3 * r.step_s:8.1f} "
            f"{r.clips_per_s:8.1f} {r.mfu:6.1%}"
        )
    return "\n".join(lines)
