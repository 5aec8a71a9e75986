"""`vidscale bench throughput`, `shard-train`, `profile` and `gpu-report`: the measurements of
the GPU acceptance run (`scripts/gpu_checks.sh`), each also runnable on the CPU. Their parsers
and commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from vidscale.cli.args import (
    FAST_PATH_SETTINGS,
    _at_least,
    _check_device,
    _check_parent,
    _name_list,
)
from vidscale.cli.output import add_json_flag, print_json_file, progress_to_stderr
from vidscale.config import ConfigError

# A fixed setting, never `auto`: a run on a lent GPU spends no time probing.
SETTINGS = [s for s in FAST_PATH_SETTINGS if s != "auto"]


def cmd_bench_throughput(args: argparse.Namespace) -> int:
    from vidscale.bench.compute import throughput
    from vidscale.bench.compute.throughput import DEFAULT_MODELS, ThroughputConfig

    _check_parent("--out-json", args.out_json)
    variants = {"eager": (False,), "compiled": (True,), "both": (False, True)}[args.compile]
    cfg = ThroughputConfig(
        models=tuple(args.models or DEFAULT_MODELS),
        setting=args.fast_path,
        compile=variants,
        compile_backend=args.compile_backend,
        compile_models=tuple(args.compile_only or ()),
        batch=args.batch,
        fill=args.fill_batch,
        max_batch=max(args.max_batch, args.batch) if not args.fill_batch else args.max_batch,
        size=args.size,
        frames=args.frames,
        warmup=args.warmup,
        steps=args.steps,
        peak_size=args.peak_size,
    )
    try:
        cfg.validate()
    except ValueError as err:
        raise ConfigError(f"bench throughput: {err}") from err
    _check_device(args.device)
    try:
        with progress_to_stderr(args.json):
            result = throughput.run(cfg, out_json=args.out_json, progress=True, device=args.device)
    except ValueError as err:  # the first batch tried does not fit
        raise ConfigError(f"bench throughput: {err}") from err
    if args.json:
        print_json_file(args.out_json)
        return 0
    print(throughput.format_table(result))
    print(f"wrote {args.out_json}")
    return 0


def cmd_bench_shard_train(args: argparse.Namespace) -> int:
    from vidscale.bench.data import shard_train
    from vidscale.bench.data.shard_train import ShardTrainConfig

    _check_parent("--out-json", args.out_json)
    cfg = ShardTrainConfig(
        root=args.prepared,
        model=args.model,
        batch=args.batch,
        frames=args.frames,
        size=args.size,
        workers=args.workers,
        steps=args.steps,
        warmup=args.warmup,
        setting=args.fast_path,
    )
    _check_device(args.device)
    try:
        with progress_to_stderr(args.json):
            result = shard_train.run(cfg, out_json=args.out_json, device=args.device)
    except ValueError as err:
        raise ConfigError(f"bench shard-train: {err}") from err
    if args.json:
        print_json_file(args.out_json)
        return 0
    print(
        f"{cfg.model} from {result.videos} prepared videos, batch {cfg.batch}, "
        f"{result.settings.workers} workers: {result.clips_per_s:.1f} clips/s, "
        f"data wait {result.data_wait_fraction:.1%}, workers "
        f"{1e3 * result.worker_cpu_s_per_clip:.1f} CPU ms per clip "
        f"({result.worker_cores_busy:.1f} cores busy), training process "
        f"{result.main_cores_busy:.1f} cores"
    )
    print(f"wrote {args.out_json}")
    return 0


def cmd_bench_profile(args: argparse.Namespace) -> int:
    from vidscale.bench.compute import profile
    from vidscale.bench.compute.train_step import check_trainable
    from vidscale.models.registry import default_frames, list_models

    _check_parent("--out-json", args.out_json)
    cfg = profile.ProfileConfig(
        models=tuple(args.models),
        batch=args.batch,
        size=args.size,
        frames=args.frames,
        setting=args.fast_path,
        warmup=args.warmup,
        top=args.top,
    )
    for name in cfg.models:
        if name not in list_models():
            raise ConfigError(f"bench profile: unknown model {name!r}; see `vidscale models`")
        frames = args.frames or default_frames(name)
        try:
            check_trainable(name, frames=frames, size=args.size, batch=args.batch)
        except ValueError as err:
            raise ConfigError(f"bench profile: {err}") from err
    _check_device(args.device)
    with progress_to_stderr(args.json):
        result = profile.run(cfg, out_json=args.out_json, device=args.device)
    if args.json:
        print_json_file(args.out_json)
        return 0
    print(profile.format_profile(result))
    print(f"wrote {args.out_json}")
    return 0


def cmd_bench_gpu_report(args: argparse.Namespace) -> int:
    from vidscale.bench import gpu_report

    if not args.work.is_dir():
        raise ConfigError(f"bench gpu-report: {args.work} is not a directory")
    _check_parent("--out-json", args.out_json)
    _check_parent("--out-md", args.out_md)
    cfg = gpu_report.GpuReportConfig(work=args.work, out_md=args.out_md, dry_run=args.dry_run)
    report = gpu_report.run(cfg, out_json=args.out_json, device=args.device)
    if args.json:
        print_json_file(args.out_json)
        return 0 if report.passed else 1
    verdict = "passed" if report.passed else "failed: " + "; ".join(report.problems)
    print(f"GPU acceptance run {verdict}; wrote {args.out_json}, {args.out_md}")
    return 0 if report.passed else 1


def add_parsers(bench_sub: argparse._SubParsersAction) -> None:
    """The four sub-commands of `vidscale bench`."""
    p = bench_sub.add_parser(
        "throughput",
        help="training clips/s and MFU at the batch that fills the device, eager and compiled",
    )
    p.add_argument("models", nargs="*", metavar="MODELS", help="default: TSM, TSN, I3Ds, SlowFast")
    p.add_argument("--fast-path", choices=SETTINGS, default="bf16+cl", help="(bf16+cl)")
    p.add_argument("--compile", choices=["eager", "compiled", "both"], default="both")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend")
    p.add_argument(
        "--compile-only", type=_name_list(), default=None, help="compile these models only: a,b"
    )
    p.add_argument("--batch", type=_at_least(1), default=8, help="the batch, or the first tried")
    p.add_argument("--fill-batch", action="store_true", help="double the batch until OOM")
    p.add_argument("--max-batch", type=_at_least(1), default=256, help="cap of --fill-batch")
    p.add_argument("--size", type=_at_least(32), default=224)
    p.add_argument("--frames", type=_at_least(0), default=0, help="0: each model's own")
    p.add_argument("--warmup", type=_at_least(1), default=3, help="untimed steps")
    p.add_argument("--steps", type=_at_least(1), default=10, help="timed steps")
    p.add_argument("--peak-size", type=_at_least(0), default=0, help="peak matmul side")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--out-json", type=Path, default=Path("bench_throughput.json"))
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_throughput)

    p = bench_sub.add_parser(
        "shard-train", help="training from prepared shards: clips/s, data wait, CPU cores used"
    )
    p.add_argument("prepared", type=Path, help="a directory made by `vidscale prepare`")
    p.add_argument("--model", default="tsm_resnet50")
    p.add_argument("--fast-path", choices=SETTINGS, default="bf16+cl", help="(bf16+cl)")
    p.add_argument("--batch", type=_at_least(1), default=32)
    p.add_argument("--frames", type=_at_least(1), default=8)
    p.add_argument("--size", type=_at_least(32), default=224)
    p.add_argument("--workers", type=_at_least(0), default=0, help="0: every core but one")
    p.add_argument("--steps", type=_at_least(1), default=200, help="timed steps")
    p.add_argument("--warmup", type=_at_least(1), default=10, help="untimed steps")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--out-json", type=Path, default=Path("bench_shard_train.json"))
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_shard_train)

    p = bench_sub.add_parser(
        "profile", help="one training step profiled: top kernels, matmul vs memory-bound, gaps"
    )
    p.add_argument("models", nargs="+", metavar="MODELS")
    p.add_argument("--fast-path", choices=SETTINGS, default="bf16+cl", help="(bf16+cl)")
    p.add_argument("--batch", type=_at_least(1), default=8)
    p.add_argument("--size", type=_at_least(32), default=224)
    p.add_argument("--frames", type=_at_least(0), default=0, help="0: each model's own")
    p.add_argument("--warmup", type=_at_least(0), default=2, help="untimed steps first")
    p.add_argument("--top", type=_at_least(1), default=15, help="operations listed")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--out-json", type=Path, default=Path("bench_profile.json"))
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_profile)

    p = bench_sub.add_parser(
        "gpu-report", help="merge the GPU acceptance run's step results; summary with targets"
    )
    p.add_argument("work", type=Path, help="the run's work directory (steps.tsv, step JSONs)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--dry-run", action="store_true", help="CUDA tests are expected skipped")
    p.add_argument("--out-json", type=Path, default=Path("results.json"))
    add_json_flag(p)
    p.add_argument("--out-md", type=Path, default=Path("summary.md"))
    p.set_defaults(fn=cmd_bench_gpu_report)
