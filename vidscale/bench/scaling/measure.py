"""`vidscale bench scaling`: training speed against the number of processes, and where each
step's time goes (TSM paper §3c "Networking Efficiency", §4 "Scalability", Fig. 6).

Scaling efficiency is the paper's: the actual training speed (clips/s) with P processes divided
by the ideal, one process's speed times P, with the per-process batch held constant (weak
scaling, as §4: 8 clips per GPU whatever the GPU count). Each step's time is split into three
measured parts, on every rank (`scaling.worker`): exposed data wait (blocked in the loader),
exposed communication (the collectives the step waited for: DDP's gradient all-reduces past the
end of the backward compute and its hooks' own work, DDP's forward buffer broadcast, AAVG's
averaging) and compute (the rest). Communication hidden behind the backward pass shows in
`comm_in_flight_s`, not in the step. Variants: DDP with each gradient hook (`comm.hook`: none,
fp16, bf16, powersgd) and AAVG (K-step model averaging, `--aavg-k`); one process runs no
communication and is every variant's baseline.

Launching. Outside torchrun, the command starts one `torchrun --standalone --nproc_per_node P
-m vidscale bench scaling ... --worker-out FILE` per P of `--nproc` (torchrun picks a free
port), each measuring every model and variant at its world size, and builds the table, the JSON
and the plot from their files. Under a torchrun the user started (several nodes, say), it
measures that world size only; `--baseline` adds the one-process rows of an earlier run's JSON,
so that speed-up and efficiency can be computed.

Arithmetic: the fast path (`train.amp` / `train.channels_last` = auto) is decided once per model
by training's own probe (`fastpath/isolation.py`, in a child process) at one process's
batch, shape and threads, before any world starts, and every world runs that setting: a row's
speed-up then compares the same arithmetic. Under a torchrun the user started, each world
decides as training would at its size (`fastpath.probe.decide`), unless `--fast-path`
names them (e.g. the earlier run's, to compare with its `--baseline`).

Threads: each process runs `--threads` CPU threads (default: the cores over the largest P, the
same for every P, so that a process has the same resources in every row). On CPU the processes
share one machine's memory bandwidth, so a CPU row also measures that contention; on a GPU host
each process gets a device of its own.

`run(ScalingConfig, *, out_json, progress, plot, baseline)` returns the typed report
(`result.ScalingResult`), whose `to_dict()` is the JSON it writes; `vidscale plan --measured`
and `--baseline` read that JSON back with `ScalingResult.read`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from vidscale.atomic import atomic_write_text
from vidscale.bench import options
from vidscale.bench.results import write_result
from vidscale.bench.scaling.config import ScalingConfig
from vidscale.bench.scaling.result import ScalingResult, ScalingRun
from vidscale.config import ConfigError
from vidscale.distributed.strategy import AAVGStrategy, DDPStrategy


class ScalingRunFailed(RuntimeError):
    """A torchrun launch of the benchmark exited with an error (its output says why)."""


# -- checking and resolving the request --------------------------------------------------------


def torchrun_world() -> int | None:
    """The world size when this process is a rank started by torchrun (or any launcher that
    sets WORLD_SIZE), else None."""
    world = os.environ.get("WORLD_SIZE")
    return int(world) if world is not None else None


def _device_type(cfg: ScalingConfig) -> str:
    import torch

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    if cfg.device == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


def check_procs(procs: tuple[int, ...], *, device_type: str, devices: int) -> None:
    """One process per GPU: more processes than local devices is an error. (On CPU, more
    processes x threads than cores is allowed, and warned about by `resolve`.)"""
    if not procs or min(procs) < 1:
        raise ConfigError(f"--nproc: each count must be >= 1, got {list(procs)}")
    if device_type == "cuda" and max(procs) > devices:
        raise ConfigError(
            f"--nproc: {max(procs)} processes but this host has {devices} CUDA device(s) "
            "(one process per device; run more under torchrun on several nodes)"
        )


def _check_models(cfg: ScalingConfig) -> None:
    from vidscale.bench.compute.train_step import check_trainable
    from vidscale.models.registry import list_models

    for name in cfg.models:
        if name not in list_models():
            raise ConfigError(f"--models: unknown model {name!r}; see `vidscale models`")
        try:
            check_trainable(name, frames=cfg.frames, size=cfg.size, batch=cfg.batch)
        except ValueError as err:
            raise ConfigError(f"--models: {err}") from None
    from vidscale.fastpath.settings import Candidate

    for item in cfg.fast_settings:
        name, _, label = item.partition("=")
        if name not in cfg.models:
            raise ConfigError(f"--fast-path: {item!r} names no model of --models (MODEL=SETTING)")
        try:
            Candidate.from_label(label)
        except ValueError:
            raise ConfigError(
                f"--fast-path: {item!r}: the setting is one of fp32, fp32+cl, bf16, bf16+cl"
            ) from None


def _check_numbers(cfg: ScalingConfig) -> None:
    checks = [
        (cfg.steps >= 1, f"--steps: must be >= 1, got {cfg.steps}"),
        (cfg.warmup >= 0, f"--warmup: must be >= 0, got {cfg.warmup}"),
        (cfg.batch >= 1, f"--batch: must be >= 1, got {cfg.batch}"),
        (cfg.frames >= 1, f"--frames: must be >= 1, got {cfg.frames}"),
        (cfg.threads >= 0, f"--threads: must be >= 0 (0: cores / processes), got {cfg.threads}"),
        (cfg.workers >= 0, f"--workers: must be >= 0, got {cfg.workers}"),
        (cfg.aavg_k >= 1, f"--aavg-k: must be >= 1, got {cfg.aavg_k}"),
        (bool(cfg.models), "--models: name at least one model"),
        (bool(cfg.strategies), "--strategies: name at least one strategy"),
        (cfg.bucket_cap_mb > 0, f"--bucket-cap-mb: must be > 0, got {cfg.bucket_cap_mb}"),
        (
            cfg.source in ("videos", "shards", "stream"),
            f"--source: must be videos, shards or stream, got {cfg.source!r}",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    if DDPStrategy.name in cfg.strategies and not cfg.hooks:
        raise ConfigError(f"--hooks: name at least one hook for the {DDPStrategy.name} strategy")


def _check_variants(cfg: ScalingConfig, procs: tuple[int, ...]) -> None:
    """What the variants need, where several processes run them."""
    if max(procs) == 1:
        return
    if DDPStrategy.name in cfg.strategies and "powersgd" in cfg.hooks and cfg.warmup < 2:
        raise ConfigError(
            f"--warmup: PowerSGD needs >= 2 warm-up steps (it starts with plain all-reduces), "
            f"got {cfg.warmup}"
        )
    if AAVGStrategy.name in cfg.strategies and cfg.steps % cfg.aavg_k:
        raise ConfigError(
            f"--steps: with {AAVGStrategy.name}, a multiple of --aavg-k ({cfg.aavg_k}) so that every "
            f"averaging period is measured whole, got {cfg.steps}"
        )


def resolve(cfg: ScalingConfig, *, world: int | None = None) -> ScalingConfig:
    """Check `cfg` (ConfigError naming the flag) and fill in its defaults for this host.

    `world`: torchrun's world size when running under it; its `procs` is then that world size
    (`--nproc` may only repeat it). `threads` 0 becomes the cores over the largest process
    count on this node.
    """
    import torch

    _check_numbers(cfg)
    device_type = _device_type(cfg)
    devices = torch.cuda.device_count() if device_type == "cuda" else 0
    cores = os.cpu_count() or 1
    if world is not None:
        if cfg.procs and cfg.procs != (world,):
            raise ConfigError(
                f"--nproc: under torchrun the world size ({world}) is measured, got "
                f"{list(cfg.procs)} (leave --nproc out)"
            )
        procs: tuple[int, ...] = (world,)
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    else:
        procs = tuple(sorted(set(cfg.procs))) or _default_procs(device_type, devices, cores)
        check_procs(procs, device_type=device_type, devices=devices)
        local = max(procs)
    _check_variants(cfg, procs)
    threads = cfg.threads or max(1, cores // local)
    if device_type == "cpu" and local * threads > cores and os.environ.get("RANK", "0") == "0":
        print(
            f"bench scaling: warning: {local} processes x {threads} threads exceed the "
            f"{cores} cores: the processes will time-share cores",
            file=sys.stderr,
        )
    _check_models(cfg)
    cfg = replace(cfg, procs=procs, threads=threads, device=device_type)  # type: ignore[arg-type]
    if cfg.data:  # the data decide the class count, and must fill a batch per process
        from vidscale.bench.scaling.data import classes_of

        cfg = replace(cfg, num_classes=classes_of(cfg))
    return cfg


def _default_procs(device_type: str, devices: int, cores: int) -> tuple[int, ...]:
    """Powers of two up to the devices (GPU) or cores (CPU), and that count itself."""
    most = devices if device_type == "cuda" else cores
    counts = {1, most}
    p = 2
    while p < most:
        counts.add(p)
        p *= 2
    return tuple(sorted(counts))


# -- launching ---------------------------------------------------------------------------------


def as_argv(cfg: ScalingConfig) -> list[str]:
    """The `bench scaling` flags that reproduce `cfg` in a torchrun worker: one per field that
    has a flag (`bench.options`), all but the process count: a worker takes that from its
    world size (`resolve`), and torchrun's parser, which sees the worker's flags too, would
    refuse `--nproc` as an ambiguous `--nproc-per-node`."""
    argv = []
    for f in dataclasses.fields(cfg):
        if options.HELP in f.metadata and f.name != "procs":
            value = getattr(cfg, f.name)
            text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
            argv += [options.flag_name(f), text]
    if not cfg.fast_path:
        argv += ["--fast-path", "fp32"]
    elif cfg.fast_settings:
        argv += ["--fast-path", ",".join(cfg.fast_settings)]
    return argv


def decide_fast_settings(cfg: ScalingConfig, *, progress: bool = True) -> ScalingConfig:
    """`cfg` with the fast-path setting of every model not yet given one: training's probe
    (in a child process) at one process's batch, clip shape and `cfg.threads`, with host memory
    retained on CPU as the workers do. Prints each decision with `progress`."""
    import functools

    import torch

    from vidscale.fastpath.isolation import probe_isolated
    from vidscale.fastpath.probe import FastPathDecision
    from vidscale.fastpath.settings import candidates
    from vidscale.models.registry import build_model

    if not cfg.fast_path:
        return cfg
    device = torch.device(_device_type(cfg))
    settings = list(cfg.fast_settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)  # the child probes with this process's threads
    try:
        for name in cfg.models:
            if cfg.fast_setting(name) is not None:
                continue
            measured = probe_isolated(
                functools.partial(build_model, cfg.model_config(name)),
                candidates(device, bf16=None, channels_last=None),
                device=device,
                shape=cfg.probe_shape(),
                host_memory=device.type == "cpu",
            )
            decision = FastPathDecision.from_probe(measured, shape=cfg.probe_shape())
            if progress:
                print(f"bench scaling: {name}: {decision.describe()}", flush=True)
            settings.append(f"{name}={decision.candidate.label}")
    finally:
        torch.set_num_threads(threads)
    return replace(cfg, fast_settings=tuple(settings))


def launch(cfg: ScalingConfig, procs: int, work_dir: Path) -> list[dict[str, Any]]:
    """Run the measurement as `procs` torchrun processes; return rank 0's measurements.

    The processes' output goes to this process's stdout and stderr (progress and errors).
    """
    out = work_dir / f"procs_{procs}.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(procs),
        "-m",
        "vidscale",
        "bench",
        "scaling",
        *as_argv(replace(cfg, procs=(procs,))),
        "--worker-out",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(cfg.threads)}
    done = subprocess.run(cmd, env=env, check=False)
    if done.returncode != 0 or not out.is_file():
        raise ScalingRunFailed(
            f"the {procs}-process torchrun exited with status {done.returncode} "
            "(its output is above)"
        )
    measurements: list[dict[str, Any]] = json.loads(out.read_text())["measurements"]
    return measurements


def run_worker(cfg: ScalingConfig, out: Path) -> None:
    """A torchrun rank started by `launch`: measure, and write rank 0's measurements to `out`."""
    from vidscale.bench.scaling.worker import measure_world

    measurements = measure_world(cfg)
    if measurements is not None:
        atomic_write_text(out, json.dumps({"measurements": measurements}))


def run(
    config: ScalingConfig,
    *,
    out_json: Path,
    progress: bool = False,
    plot: Path | None = None,
    baseline: Path | None = None,
) -> ScalingResult | None:
    """Measure `config` (resolved by `resolve`; its `device` is the device) and write the
    JSON to `out_json` atomically and the plot to `plot` if given; the typed report, or None
    on ranks other than 0 under a torchrun the user started.

    `baseline`: an earlier run's JSON whose one-process rows join this one's (under a
    torchrun the user started, which measures its world size only), its fast-path settings
    reused unless `config` names some. `progress`: print each fast-path decision. Raises
    `ConfigError` for a baseline that cannot be read or was measured otherwise, and
    `ScalingRunFailed` when a torchrun this starts fails.
    """
    from vidscale.bench.scaling.report import build_report, plot_scaling

    earlier = read_baseline(baseline, config) if baseline is not None else None
    cfg = config
    if torchrun_world() is not None:
        if earlier is not None and not cfg.fast_settings:  # the baseline's arithmetic
            cfg = replace(cfg, fast_settings=earlier.settings.fast_settings)
        from vidscale.bench.scaling.worker import measure_world

        measured = measure_world(cfg)
        if measured is None:
            return None
    else:
        measured = []
        cfg = decide_fast_settings(cfg, progress=progress)  # one setting per model, every P
        with tempfile.TemporaryDirectory(prefix="vidscale-scaling-") as tmp:
            for procs in cfg.procs:
                measured += launch(cfg, procs, Path(tmp))
    rows = [] if earlier is None else _one_process_rows(earlier, cfg)
    result = build_report(cfg, [r.as_measurement() for r in rows] + measured)
    write_result(out_json, result.to_dict())
    if plot is not None:
        plot_scaling(result, plot)
    return result


_SAME_SETTINGS = ("batch", "frames", "size", "num_classes", "threads", "device", "fast_path")


def read_baseline(path: Path, cfg: ScalingConfig) -> ScalingResult:
    """An earlier `bench scaling` JSON, for runs that measure only a larger world size: its
    settings must be this run's, and it must hold a one-process run of a model of `cfg`
    (`ConfigError` naming `--baseline` otherwise). Its fast-path settings are none in a file
    from before they were recorded."""
    try:
        earlier = ScalingResult.read(path)
    except ValueError as err:
        raise ConfigError(f"--baseline: {err}") from None
    for key in _SAME_SETTINGS:
        if key == "threads" and cfg.device != "cpu":
            continue  # a GPU process's speed does not hang on its CPU threads
        theirs, ours = getattr(earlier.settings, key), getattr(cfg, key)
        if theirs != ours:
            raise ConfigError(
                f"--baseline: {path} was measured with {key}={theirs!r}, this run has {ours!r}"
            )
    if not _one_process_rows(earlier, cfg):
        raise ConfigError(f"--baseline: {path} has no 1-process run of {list(cfg.models)}")
    return earlier


def _one_process_rows(earlier: ScalingResult, cfg: ScalingConfig) -> list[ScalingRun]:
    return [r for r in earlier.runs if r.procs == 1 and r.model in cfg.models]
