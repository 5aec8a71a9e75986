"""`vidscale bench models`: the TSM paper's Table 1 and Table 2, measured in one run.

Table 1 (§3, "Design Guidelines", Figure 3a) compares FLOPs, parameters, input size,
throughput, hardware utilisation and Compute/IO. Here, for registered models on the current
device:

- MACs, parameters, Compute/IO (MACs per uint8 input byte, the reading under which the paper's
  27.4k / 6.85k / 16.6k work out) from `bench.compute.flops.model_info`; FLOPs = 2·MACs (the paper's
  "FLOPs" column counts MACs). Accuracy is left to the user's runs (`vidscale eval`).
- Training: seconds and clips/s of the trainer's step (`step.fixed_batch.FixedBatchStep`:
  forward and cross-entropy under the autocast, backward, gradient norm, SGD with momentum and
  weight decay), its FLOPs counted as 3x the forward's (backward ≈ 2x forward).
- Inference: clips/s of an eval-mode forward pass without autograd (the paper's throughput).
- Utilisation (§3a): achieved FLOP/s over peak FLOP/s, the peak being a large matmul in the
  same dtype timed in the same rounds (`hardware.matmul_probe`).
- Table 2: frames at the output of each stage.

Every timed call (each model's step, each model's inference, each peak matmul) runs once per
round, round-robin, the starting point rotating every round; medians over rounds are reported.
Drift (clock changes, other processes on a shared machine) then hits every model alike, so the
ratios to the baseline model hold even where absolute numbers move; the comparisons take the
median of the per-round ratios, which cancels drift slower than a round. Before its timed calls
in a round, each call runs `settle` times untimed, so a sample sees what a training loop sees
from step to step (the allocator and caches holding this model's buffers, not the previous
model's); minor page faults per timed call are recorded to show when that failed. Modes:
"fast" is what training runs by default (`train.amp` / `train.channels_last` = "auto"): the
trainer's start-up probe (`fastpath/probe.py`) is run for each model at this batch and
clip shape, and the setting it chooses (fp32 or bf16 autocast, default layout or channels-last)
is timed, with retained host memory on CPU and TF32 on CUDA as the trainer's fast path; each
row records the choice and the probe's numbers (`auto_*`). "fp32" is float32 in the default
layout (TF32 off, glibc's allocator as is), training with `train.fast_path=false`, measured
beside it so that the fast path's speedup (the acceptance of "auto": never below 1 beyond the
noise) comes out of the same run. The probe never reads or writes the trainer's cache: the
table reports this run's measurement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from vidscale.bench import options
from vidscale.bench.compute.flops import ModelInfo, model_info
from vidscale.bench.compute.model_ratios import PASSES, Pass, add_ratios, comparisons
from vidscale.bench.compute.train_step import check_trainable
from vidscale.bench.options import option
from vidscale.bench.results import plain, write_result
from vidscale.errors import InputError
from vidscale.fastpath import hardware
from vidscale.fastpath.host_memory import set_host_memory_retention
from vidscale.fastpath.isolation import probe_isolated
from vidscale.fastpath.probe import (
    PROBE,
    FastPathDecision,
    ProbeSettings,
    ProbeShape,
)
from vidscale.fastpath.settings import (
    FP32,
    FastPath,
    candidates,
    hardware_rule,
    set_tf32,
)
from vidscale.fastpath.subject import Subject
from vidscale.fastpath.timing import RoundRobinSamples, spread, time_round_robin
from vidscale.models.registry import (
    ModelConfig,
    build_model,
    default_frames,
    list_models,
    stage_temporal_resolutions,
)
from vidscale.step.applied import AppliedSteps

Mode = Literal["fp32", "fast"]
Clock = Literal["wall", "process"]
MODES: tuple[Mode, ...] = ("fp32", "fast")
# Table 1's models and TSN, the shift's zero-cost reference (TSM/TSN step time).
DEFAULT_MODELS = ("tsm_resnet50", "tsn_resnet50", "i3d_resnet50_3x1x1", "i3d_resnet50_3x3x3")
# Table 2's columns; "pool2" exists only in trunks that pool time after res2 (I3D 3x1x1).
STAGES = ("data", "conv1", "pool1", "res2", "pool2", "res3", "res4", "res5", "global_pool")


@dataclass(frozen=True)
class BenchConfig:
    """How `bench models` measures (the JSON's `settings`), and for how long.

    `frames` is the clip length of every model (0: each model's own: TSM/TSN 8, I3D 3x3x3 16,
    I3D 3x1x1 32, as in Table 1). `warmup` untimed rounds precede `repeats` timed ones; a timed
    sample is the mean of `steps` consecutive calls, run right after `settle` untimed ones.
    `peak_size` is the peak matmul's side (0: 2048 on CPU, 8192 on CUDA); `threads` > 0 sets
    torch's CPU threads. `probe_repeats` is the timed rounds of the start-up probe that decides
    the "fast" rows' setting (the trainer's: 5, after one warm-up round; below 5 the probe
    cannot show a gain, and "auto" stays fp32: `rule.rounds_needed`); it times by
    the wall clock whatever `clock` says. `clock="process"` times CPU runs by the process's CPU
    time, so time spent preempted by other processes counts for nobody (use it with one thread,
    or idle OpenMP threads' spinning counts too); throughputs are then per CPU-second.
    """

    batch: int = options.batch(1)
    size: int = options.size()
    frames: int = options.frames(0)
    num_classes: int = options.num_classes()
    modes: tuple[Mode, ...] = ("fast",)
    passes: tuple[Pass, ...] = option(PASSES, help="passes timed")
    warmup: int = options.warmup(1, help="untimed rounds")
    repeats: int = option(5, help="timed rounds", low=1)
    steps: int = options.steps(1, help="calls per timed sample")
    settle: int = option(1, help="untimed calls before each sample", low=0)
    peak_size: int = options.peak_size()
    threads: int = option(0, help="CPU threads (0: torch's)", low=0)
    clock: Clock = option("wall", help="process: time CPU runs by the process's CPU time")
    probe_repeats: int = option(
        PROBE.repeats,
        help="timed rounds of the probe deciding what auto (the fast rows) runs",
        low=1,
    )

    @staticmethod
    def quick() -> BenchConfig:
        """Tiny settings for a smoke test: 64-pixel clips (I3D 3x3x3 keeps 2x2 pixels at
        res5, so BatchNorm still sees several values at batch 1), one timed round, a small
        peak matmul, a 2-round probe (so "auto" stays fp32, and the other settings are timed
        for one round only)."""
        return BenchConfig(
            size=64,
            num_classes=10,
            warmup=0,
            repeats=1,
            settle=0,
            peak_size=256,
            probe_repeats=2,
        )

    def validate(self) -> None:
        """Raise `InputError` naming the flag of the first value that cannot work."""
        if not self.modes or not set(self.modes) <= set(MODES):
            raise InputError(f"modes must be in {MODES}")
        if not self.passes:
            raise InputError("--passes: none given")
        options.check_options(self)
        if self.clock not in ("wall", "process"):
            raise InputError(f"--clock: expected wall or process, got {self.clock!r}")
        if self.passes and not set(self.passes) <= set(PASSES):
            raise InputError(f"--passes: expected some of {','.join(PASSES)}, got {self.passes}")

    def clip_frames(self, name: str) -> int:
        return self.frames or default_frames(name)


@dataclass(frozen=True)
class ModelsConfig:
    """What `bench models` runs (`run`): `models` (Table 1's and TSN by default), the model
    every ratio is to (`baseline`; None: the first), and how they are measured (`settings`)."""

    models: tuple[str, ...] = DEFAULT_MODELS
    baseline: str | None = option(None, help="ratios are to this model (default: the first)")
    settings: BenchConfig = field(default_factory=BenchConfig)


@dataclass(frozen=True)
class ModelsResult:
    """Everything one `bench models` run measured: the host, the settings (`BenchConfig`'s,
    with the peak matmul's side and the baseline), the peak FLOP/s of each arithmetic, one
    Table 1 row per (model, mode), the baseline comparisons and Table 2. `to_dict()` is what
    `--out-json` writes."""

    hardware: dict[str, Any]
    settings: dict[str, Any]
    peak_flops_per_s: dict[str, float]
    rows: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    table2: dict[str, list[int | None]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = plain(dataclasses.asdict(self))
        return document | {"table2_stages": list(STAGES)}


@dataclass
class _Subject:
    """One model in one mode: the benchmark subject (`fastpath.subject.Subject`: its optimizer,
    fixed random batch and step, every step's update counted) with the mode's process-wide
    settings, ready to time."""

    name: str
    mode: Mode
    tf32: bool
    subject: Subject
    retain_host_memory: bool  # CPU fast path: glibc keeps freed memory (see `host_memory`)
    auto: FastPathDecision | None = None  # "fast" rows: the probe's decision they run

    @property
    def fast(self) -> FastPath:
        return self.subject.fast

    @property
    def applied(self) -> AppliedSteps:
        return self.subject.applied

    @property
    def compute(self) -> str:
        """The arithmetic its convolutions run in, naming the peak it is compared with."""
        return "bfloat16" if self.fast.bf16 else "tf32" if self.tf32 else "float32"

    def _settings(self) -> None:
        set_tf32(self.tf32)  # process-wide; the rows interleave TF32 off (fp32) and on (fast)
        if self.fast.device.type == "cpu":
            set_host_memory_retention(self.retain_host_memory)

    def train_step(self) -> None:
        self._settings()
        self.subject()

    def infer(self) -> None:
        self._settings()
        self.subject.infer()


def auto_choice(name: str, *, cfg: BenchConfig, device: torch.device) -> FastPathDecision:
    """What training's "auto" chooses for `name` at `cfg`'s batch and clip shape on `device`:
    the trainer's probe, in a child process with the fast rows' settings (retained host memory
    on CPU, TF32 and cudnn autotuning on CUDA), `cfg.probe_repeats` timed rounds."""
    shape = ProbeShape(cfg.batch, 3, cfg.clip_frames(name), cfg.size, cfg.num_classes)
    settings = ProbeSettings(repeats=cfg.probe_repeats)
    load = hardware.load_average()
    measured = probe_isolated(  # in a child: a setting that hangs or crashes is left out
        functools.partial(build_model, _model_cfg(name, cfg)),
        candidates(device, bf16=None, channels_last=None),
        device=device,
        shape=shape,
        settings=settings,
        host_memory=device.type == "cpu",
    )
    return FastPathDecision.from_probe(measured, shape=shape, load_average=load)


def _subject(
    name: str,
    *,
    mode: Mode,
    cfg: BenchConfig,
    device: torch.device,
    auto: FastPathDecision | None = None,
) -> _Subject:
    setting = FP32 if mode == "fp32" else auto.candidate if auto else hardware_rule(device)
    subject = Subject.build(
        functools.partial(build_model, _model_cfg(name, cfg)),
        setting=setting,
        shape=ProbeShape(cfg.batch, 3, cfg.clip_frames(name), cfg.size, cfg.num_classes),
        device=device,
    )
    tf32 = mode == "fast" and device.type == "cuda"  # what the trainer's fast path turns on
    retain = mode == "fast" and device.type == "cpu"  # as the trainer's CPU fast path
    return _Subject(name, mode, tf32, subject, retain, auto)


def check_request(config: ModelsConfig) -> str:
    """Check everything before anything is built; returns the baseline (default: the first
    model). Raises `InputError` naming the setting, the model or the baseline at fault."""
    names, cfg = config.models, config.settings
    cfg.validate()
    if not names:
        raise InputError("no models given; see `vidscale models`")
    known = set(list_models())
    for name in names:
        if name not in known:
            raise InputError(f"unknown model {name!r}; see `vidscale models`")
    twice = sorted({n for n in names if list(names).count(n) > 1})
    if twice:
        raise InputError(f"models listed more than once: {', '.join(twice)}")
    baseline = config.baseline or names[0]
    if baseline not in names:
        raise InputError(f"baseline {baseline!r} is not among the models {list(names)}")
    for name in names:
        check_trainable(name, frames=cfg.clip_frames(name), size=cfg.size, batch=cfg.batch)
    return baseline


def run(
    config: ModelsConfig,
    *,
    out_json: Path,
    progress: bool = False,
    device: str | torch.device = "auto",
) -> ModelsResult:
    """Table 1 rows, one per (model, mode), measured interleaved in one run on `device`, with
    ratios to the baseline; Table 2 for the same clips. Writes `out_json` atomically
    (`ModelsResult.to_dict()`); `progress` reports each probe and finished round on stderr.
    Raises `InputError` for a request that cannot work (`check_request`).
    """
    names, cfg = config.models, config.settings
    baseline = check_request(config)
    dev = hardware.resolve_device(device)
    if cfg.clock == "process" and dev.type != "cpu":
        raise InputError("--clock process measures CPU time: it needs --device cpu")
    side = cfg.peak_size or hardware.DEFAULT_PEAK_SIZE.get(dev.type, 2048)
    with _restoring_torch_settings():
        if cfg.threads > 0 and dev.type == "cpu":
            torch.set_num_threads(cfg.threads)
        choices = _auto_choices(names, cfg, dev, progress=progress)
        subjects = [
            _subject(n, mode=m, cfg=cfg, device=dev, auto=choices.get(n) if m == "fast" else None)
            for m in cfg.modes
            for n in names
        ]
        calls, peak_flops = _timed_calls(subjects, passes=cfg.passes, device=dev, peak_size=side)
        host = hardware.describe(dev)
        samples = time_round_robin(
            calls,
            warmup=cfg.warmup,
            repeats=cfg.repeats,
            steps=cfg.steps,
            settle=cfg.settle,
            sync=lambda: hardware.synchronize(dev),
            clock=time.process_time if cfg.clock == "process" else time.perf_counter,
            on_round=_progress_printer(cfg) if progress else None,
        )
    host["load_average_end"] = hardware.load_average()
    peaks = {k: f / statistics.median(samples.seconds[f"peak:{k}"]) for k, f in peak_flops.items()}
    rows = add_ratios(_rows(subjects, samples, peaks, cfg=cfg), baseline=baseline)
    result = ModelsResult(
        hardware=host,
        settings=dataclasses.asdict(cfg) | {"peak_size": side, "baseline": baseline},
        peak_flops_per_s=peaks,
        rows=rows,
        comparisons=comparisons(rows, baseline=baseline),
        table2=table2(names, frames=cfg.frames),
    )
    write_result(out_json, result.to_dict())
    return result


def _auto_choices(
    names: Sequence[str], cfg: BenchConfig, device: torch.device, *, progress: bool
) -> dict[str, FastPathDecision]:
    """What "auto" chooses for each model, where the fast mode is measured."""
    choices: dict[str, FastPathDecision] = {}
    if "fast" not in cfg.modes:
        return choices
    for n in names:
        if progress:
            print(f"bench: probing what auto chooses for {n}", file=sys.stderr)
        choices[n] = auto_choice(n, cfg=cfg, device=device)
        if progress:
            print(f"bench: {n}: {choices[n].describe()}", file=sys.stderr)
    return choices


def _rows(
    subjects: Sequence[_Subject],
    samples: RoundRobinSamples,
    peaks: dict[str, float],
    *,
    cfg: BenchConfig,
) -> list[dict[str, Any]]:
    """One Table 1 row per subject, with each model's costs counted once."""
    names = dict.fromkeys(s.name for s in subjects)
    infos = {
        n: model_info(_model_cfg(n, cfg), frames=cfg.clip_frames(n), size=cfg.size) for n in names
    }
    return [_row(s, infos[s.name], samples, peaks, cfg=cfg) for s in subjects]


@contextlib.contextmanager
def _restoring_torch_settings() -> Iterator[None]:
    """Put back what measuring changes process-wide (CPU threads; TF32 and cudnn autotuning,
    which the fast path turns on), so a caller's later work runs as before."""
    threads = torch.get_num_threads()
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    cudnn = (torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = cudnn


def _model_cfg(name: str, cfg: BenchConfig) -> ModelConfig:
    return ModelConfig(name=name, num_classes=cfg.num_classes, frames=cfg.clip_frames(name))


def _progress_printer(cfg: BenchConfig) -> Callable[[int], None]:
    start = time.perf_counter()
    total = cfg.warmup + cfg.repeats

    def show(r: int) -> None:
        kind = "warmup" if r < cfg.warmup else "timed"
        elapsed = time.perf_counter() - start
        print(f"bench: round {r + 1}/{total} ({kind}), {elapsed:.0f} s", file=sys.stderr)

    return show


def _timed_calls(
    subjects: Sequence[_Subject], *, passes: Sequence[Pass], device: torch.device, peak_size: int
) -> tuple[dict[str, Callable[[], None]], dict[str, int]]:
    """The callables to time ("train:NAME:MODE", "infer:NAME:MODE", "peak:COMPUTE") and the
    FLOPs of each peak matmul, one per arithmetic the subjects compute in."""
    calls: dict[str, Callable[[], None]] = {}
    for s in subjects:
        if "train" in passes:
            calls[f"train:{s.name}:{s.mode}"] = s.train_step
        if "infer" in passes:
            calls[f"infer:{s.name}:{s.mode}"] = s.infer
    peak_flops: dict[str, int] = {}
    for compute in dict.fromkeys(s.compute for s in subjects):
        dtype = torch.bfloat16 if compute == "bfloat16" else torch.float32
        calls[f"peak:{compute}"], peak_flops[compute] = hardware.matmul_probe(
            device, dtype=dtype, size=peak_size, tf32=compute == "tf32"
        )
    return calls, peak_flops


def _row(
    s: _Subject,
    info: ModelInfo,
    samples: RoundRobinSamples,
    peaks: dict[str, float],
    *,
    cfg: BenchConfig,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model": s.name,
        "mode": s.mode,
        "bf16": s.fast.bf16,
        "channels_last": s.fast.channels_last,
        "compute": s.compute,
        "batch": cfg.batch,
        "input": f"{cfg.clip_frames(s.name)}x3x{cfg.size}x{cfg.size}",
        "accuracy": None,  # Table 1's first column: from the user's runs (`vidscale eval`)
        "params": info.params,
        "macs": info.macs,
        "flops": info.flops,
        "compute_per_io": info.compute_per_io,
        "stage_frames": info.stage_frames,
        "peak_flops_per_s": peaks[s.compute],
    }
    if s.auto is not None:
        chosen = s.auto.candidate.label
        row["auto_choice"] = chosen
        row["auto_speedup"] = s.auto.measured[chosen]["speedup"]  # probe: fp32 s / chosen s
        row["auto_reason"] = s.auto.reason
        row["auto_probe"] = s.auto.measured
        row["auto_left_out"] = s.auto.failed  # settings that hung, crashed or raised
        row["auto_dropped"] = s.auto.dropped  # settings the probe's first rounds ruled out
    # The paper's training cost convention: backward ≈ 2x forward, so a step is 3x the forward.
    for kind, flops_per_clip in (("train", 3 * info.flops), ("infer", info.flops)):
        key = f"{kind}:{s.name}:{s.mode}"
        if not samples.seconds.get(key):
            continue
        seconds = statistics.median(samples.seconds[key])
        row[f"{kind}_s"] = seconds
        row[f"{kind}_samples_s"] = samples.seconds[key]
        row[f"{kind}_spread"] = spread(samples.seconds[key])
        row[f"{kind}_page_faults"] = statistics.median(samples.page_faults[key])
        row[f"{kind}_clips_per_s"] = cfg.batch / seconds
        row[f"{kind}_flops_per_s"] = flops_per_clip * cfg.batch / seconds
        row[f"{kind}_utilization"] = row[f"{kind}_flops_per_s"] / peaks[s.compute]
    if s.applied.measured:  # a training row: its steps trained, or it is refused
        s.applied.check(f"{s.name} {s.mode} ({s.fast.candidate.label})")
        row["train_steps_run"], row["train_steps_applied"] = s.applied.measured, s.applied.applied
    return row


def table2(names: Sequence[str], *, frames: int = 0) -> dict[str, list[int | None]]:
    """Table 2: frames at the output of each of `STAGES` per model (None: no such stage);
    `frames` is every model's clip length (0: each model's own)."""
    out = {}
    for name in names:
        t = frames or default_frames(name)
        stages = stage_temporal_resolutions(ModelConfig(name=name), frames=t)
        out[name] = [stages.get(stage) for stage in STAGES]
    return out
