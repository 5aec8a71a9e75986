"""`vidscale bench throughput`, `shard-train`, `profile` and `gpu-report`: the measurements of
the GPU acceptance run (`scripts/gpu_checks.sh`), each also runnable on the CPU. Their parsers
and commands; each bench's flags are derived from its config (`cli.flags`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vidscale.cli.args import _check_device, _check_parent
from vidscale.cli.flags import add_config_flags, add_output_flags, add_renamed, config_from_args
from vidscale.cli.output import print_json_file, progress_to_stderr
from vidscale.config import ConfigError

# The fields each command sets another way than by a derived flag.
THROUGHPUT_SKIP = ("models", "compile")  # the positional MODELS; --compile eager|compiled|both
SHARD_TRAIN_SKIP = ("root",)  # the positional PREPARED
PROFILE_SKIP = ("models",)  # the positional MODELS
GPU_REPORT_SKIP = ("work",)  # the positional WORK
COMPILE = {"eager": (False,), "compiled": (True,), "both": (False, True)}


def cmd_bench_throughput(args: argparse.Namespace) -> int:
    from vidscale.bench.compute import throughput
    from vidscale.bench.compute.throughput import DEFAULT_MODELS, ThroughputConfig

    _check_parent("--out-json", args.out_json)
    base = ThroughputConfig(
        models=tuple(args.models or DEFAULT_MODELS), compile=COMPILE[args.compile]
    )
    cfg = config_from_args(ThroughputConfig, args, skip=THROUGHPUT_SKIP, base=base)
    cfg.validate()
    _check_device(args.device)
    with progress_to_stderr(args.json):
        result = throughput.run(cfg, out_json=args.out_json, progress=True, device=args.device)
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
    base = ShardTrainConfig(root=args.prepared)
    cfg = config_from_args(ShardTrainConfig, args, skip=SHARD_TRAIN_SKIP, base=base)
    cfg.validate()
    _check_device(args.device)
    with progress_to_stderr(args.json):
        result = shard_train.run(cfg, out_json=args.out_json, device=args.device)
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

    _check_parent("--out-json", args.out_json)
    base = profile.ProfileConfig(models=tuple(args.models))
    cfg = config_from_args(profile.ProfileConfig, args, skip=PROFILE_SKIP, base=base)
    cfg.validate()
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
    base = gpu_report.GpuReportConfig(work=args.work)
    cfg = config_from_args(gpu_report.GpuReportConfig, args, skip=GPU_REPORT_SKIP, base=base)
    _check_parent("--out-json", args.out_json)
    _check_parent("--out-md", cfg.out_md)
    report = gpu_report.run(cfg, out_json=args.out_json, device=args.device)
    if args.json:
        print_json_file(args.out_json)
        return 0 if report.passed else 1
    verdict = "passed" if report.passed else "failed: " + "; ".join(report.problems)
    print(f"GPU acceptance run {verdict}; wrote {args.out_json}, {cfg.out_md}")
    return 0 if report.passed else 1


def add_parsers(bench_sub: argparse._SubParsersAction) -> None:
    """The four sub-commands of `vidscale bench`."""
    from vidscale.bench.compute.profile import ProfileConfig
    from vidscale.bench.compute.throughput import ThroughputConfig
    from vidscale.bench.data.shard_train import ShardTrainConfig
    from vidscale.bench.gpu_report import GpuReportConfig

    p = bench_sub.add_parser(
        "throughput",
        help="training clips/s and MFU at the batch that fills the device, eager and compiled",
    )
    p.add_argument("models", nargs="*", metavar="MODELS", help="default: TSM, TSN, I3Ds, SlowFast")
    p.add_argument(
        "--compile",
        choices=list(COMPILE),
        default="both",
        help="rows: eager, compiled (torch.compile) or both (both)",
    )
    add_config_flags(p, ThroughputConfig, skip=THROUGHPUT_SKIP)
    add_output_flags(p, out_json="bench_throughput.json")
    p.set_defaults(fn=cmd_bench_throughput)

    p = bench_sub.add_parser(
        "shard-train", help="training from prepared shards: clips/s, data wait, CPU cores used"
    )
    p.add_argument("prepared", type=Path, help="a directory made by `vidscale prepare`")
    add_config_flags(p, ShardTrainConfig, skip=SHARD_TRAIN_SKIP)
    add_output_flags(p, out_json="bench_shard_train.json")
    p.set_defaults(fn=cmd_bench_shard_train)

    p = bench_sub.add_parser(
        "profile", help="one training step profiled: top kernels, matmul vs memory-bound, gaps"
    )
    p.add_argument("models", nargs="+", metavar="MODELS")
    add_config_flags(p, ProfileConfig, skip=PROFILE_SKIP)
    add_renamed(p, "--top", "--topk")
    add_output_flags(p, out_json="bench_profile.json")
    p.set_defaults(fn=cmd_bench_profile)

    p = bench_sub.add_parser(
        "gpu-report", help="merge the GPU acceptance run's step results; summary with targets"
    )
    p.add_argument("work", type=Path, help="the run's work directory (steps.tsv, step JSONs)")
    add_config_flags(p, GpuReportConfig, skip=GPU_REPORT_SKIP)
    add_output_flags(p, out_json="results.json")
    p.set_defaults(fn=cmd_bench_gpu_report)
