"""`vidscale bench data`, `data-wait`, `models`, `flow`, `scaling` and `multigrid`: the benchmarks
(each prints a table and writes JSON; with `--json` it prints that JSON instead). Their parsers
and commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vidscale.cli import bench_gpu_cmds, bench_network_cmd
from vidscale.cli.args import (
    FAST_PATH_SETTINGS,
    _above,
    _at_least,
    _check_device,
    _check_dir,
    _check_model,
    _check_parent,
    _fast_path_per_model,
    _flow_method_list,
    _int_list,
    _name_list,
    _width_x_height,
)
from vidscale.cli.output import add_json_flag, print_json_file, progress_to_stderr
from vidscale.config import ConfigError
from vidscale.data.layouts import VIDEO_LAYOUTS
from vidscale.distributed.strategy import strategy_names

if TYPE_CHECKING:
    from vidscale.bench.compute.models import Mode, ModelsConfig


def cmd_bench_data(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from vidscale.bench.data import dataload
    from vidscale.bench.data.bench_videos import PRESETS

    _check_dir("--videos", args.videos)
    _check_parent("--out-json", args.out_json)
    cfg = dataload.DataConfig(
        videos=args.videos,
        work_dir=args.work_dir,
        rounds=args.rounds,
        generate=replace(PRESETS[args.preset], count=args.count, seconds=args.seconds),
        threads=args.threads,
    )
    with progress_to_stderr(args.json):
        result = dataload.run(cfg, out_json=args.out_json)
        print(dataload.format_data_table(result.rows))
        print(dataload.format_gains(result.rows))
    if args.json:
        print_json_file(args.out_json)
    return 0


def cmd_bench_data_wait(args: argparse.Namespace) -> int:
    from vidscale.bench.data import data_wait

    _check_model("--model", args.model)
    _check_dir("--videos", args.videos)
    _check_parent("--out-json", args.out_json)
    cfg = data_wait.DataWaitConfig(
        model=args.model,
        batch=args.batch,
        frames=tuple(args.frames),
        workers=tuple(args.workers),
        steps=args.steps,
        size=args.size,
        source=args.source,
        videos=args.videos,
    )
    with progress_to_stderr(args.json):
        data_wait.run(cfg, out_json=args.out_json, progress=True)
    if args.json:
        print_json_file(args.out_json)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `bench` sub-command and its own sub-commands, in `vidscale bench --help` order."""
    bench = sub.add_parser("bench", help="benchmarks: print a table, write JSON")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    p = bench_sub.add_parser("data", help="clips/s and CPU ms per clip: raw H.264 vs shards")
    p.add_argument("--videos", type=Path, default=None, help="default: generate test videos")
    p.add_argument("--out-json", type=Path, default=Path("bench_data.json"))
    p.add_argument("--work-dir", type=Path, default=None)
    p.add_argument("--count", type=_at_least(1), default=4, help="videos to generate")
    p.add_argument("--seconds", type=_above(0), default=10.0, help="length of generated videos")
    p.add_argument(
        "--preset",
        choices=["default", "k400"],
        default="default",
        help="generated videos: 340x256 CRF 23, GOP 250 and 16; k400: 456x256 CRF 21, GOP 250",
    )
    p.add_argument(
        "--threads",
        type=_at_least(1),
        default=1,
        help="also time h264_segments on N decoder threads",
    )
    p.add_argument("--rounds", type=_at_least(1), default=5)
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_data)
    p = bench_sub.add_parser("data-wait", help="share of step time blocked on data (Fig. 3b)")
    p.add_argument("--model", default="tsm_resnet18")
    p.add_argument("--batch", type=_at_least(1), default=2)
    p.add_argument("--frames", type=_int_list(1), default="8,16,32", help="clip lengths")
    p.add_argument("--workers", type=_int_list(0), default="0,1,2", help="loader processes")
    p.add_argument("--steps", type=_at_least(1), default=3)
    p.add_argument("--size", type=_at_least(32), default=112)
    p.add_argument("--source", choices=["videos", "shards"], default="videos")
    p.add_argument("--videos", type=Path, default=None)
    p.add_argument("--out-json", type=Path, default=Path("bench_data_wait.json"))
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_data_wait)
    _add_bench_models(bench_sub)
    _add_bench_flow(bench_sub)
    _add_bench_scaling(bench_sub)
    bench_network_cmd.add_parser(bench_sub)
    _add_bench_multigrid(bench_sub)
    bench_gpu_cmds.add_parsers(bench_sub)


# -- bench models ------------------------------------------------------------------------------


def _bench_models_config(args: argparse.Namespace) -> ModelsConfig:
    import dataclasses

    from vidscale.bench.compute.models import (
        DEFAULT_MODELS,
        PASSES,
        BenchConfig,
        ModelsConfig,
    )

    # Every BenchConfig field has a flag of the same name; unset flags keep the base's value.
    fields = [f.name for f in dataclasses.fields(BenchConfig) if f.name not in ("modes", "passes")]
    given = {k: getattr(args, k) for k in fields if getattr(args, k) is not None}
    # "fast" rows run what `auto` chooses; fp32 rows, when asked for too, come first.
    rows: tuple[tuple[Mode, str], ...] = (("fp32", "fp32"), ("fast", "auto"))
    modes = tuple(mode for mode, name in rows if name in args.fast_path)
    passes = tuple(dict.fromkeys(args.passes or PASSES))
    base = BenchConfig.quick() if args.quick else BenchConfig()
    settings = dataclasses.replace(base, **given, modes=modes, passes=passes)
    return ModelsConfig(tuple(args.models or DEFAULT_MODELS), args.baseline, settings)


def cmd_bench_models(args: argparse.Namespace) -> int:
    from vidscale.bench.compute import models
    from vidscale.bench.compute.models_table import format_report

    cfg = _bench_models_config(args)
    _check_parent("--out-json", args.out_json)
    try:
        models.check_request(cfg)
    except ValueError as err:
        raise ConfigError(f"bench models: {err}") from err
    _check_device(args.device)
    result = models.run(cfg, out_json=args.out_json, progress=True, device=args.device)
    if args.json:
        print_json_file(args.out_json)
        return 0
    print(format_report(result))
    print(f"wrote {args.out_json}")
    return 0


def _add_bench_models(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser(
        "models", help="TSM paper Tables 1-2: cost, speed, utilisation, frames per stage"
    )
    p.add_argument(
        "models", nargs="*", metavar="MODELS", help="default: TSM, TSN, I3D 3x1x1, I3D 3x3x3"
    )
    p.add_argument("--baseline", default=None, help="ratios are to this model (default: first)")
    p.add_argument("--batch", type=_at_least(1), default=None, help="clips per step (1)")
    p.add_argument("--size", type=_at_least(32), default=None, help="frame side (224)")
    p.add_argument("--frames", type=_at_least(0), default=None, help="0: each model's own")
    p.add_argument("--warmup", type=_at_least(0), default=None, help="untimed rounds (1)")
    p.add_argument("--repeats", type=_at_least(1), default=None, help="timed rounds (5)")
    p.add_argument("--steps", type=_at_least(1), default=None, help="calls per sample (1)")
    p.add_argument(
        "--settle", type=_at_least(0), default=None, help="untimed calls before each sample (1)"
    )
    p.add_argument(
        "--passes", type=_name_list(["train", "infer"]), default=None, help="train,infer (both)"
    )
    p.add_argument(
        "--fast-path",
        type=_name_list(["auto", "fp32"]),
        default=("auto",),
        help="rows to time: auto (what training's probe chooses), fp32, or auto,fp32 (auto)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=_at_least(0), default=None, help="CPU threads (0: torch's)")
    p.add_argument("--peak-size", type=_at_least(0), default=None, help="peak matmul side")
    p.add_argument("--num-classes", type=_at_least(1), default=None, help="classes (400)")
    p.add_argument("--clock", choices=["wall", "process"], default=None)
    p.add_argument(
        "--probe-repeats",
        type=_at_least(1),
        default=None,
        help="timed rounds of the probe deciding what auto (the fast rows) runs (5)",
    )
    p.add_argument("--quick", action="store_true", help="tiny settings for a smoke test")
    p.add_argument("--out-json", type=Path, default=Path("bench_models.json"))
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_models)


# -- bench flow --------------------------------------------------------------------------------


def cmd_bench_flow(args: argparse.Namespace) -> int:
    from vidscale.bench.data import flow

    if args.video is not None and not args.video.is_file():
        raise ConfigError(f"--video: {args.video} is not a file")
    _check_parent("--out-json", args.out_json)
    width, height = args.size
    cfg = flow.FlowConfig(
        pairs=args.pairs, width=width, height=height, methods=args.methods, video=args.video
    )
    with progress_to_stderr(args.json):
        result = flow.run(cfg, out_json=args.out_json)
    if args.json:
        print_json_file(args.out_json)
        return 0
    print(flow.format_flow_table(result))
    print(f"wrote {args.out_json}")
    return 0


def _add_bench_flow(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser(
        "flow", help="optical flow per CPU core: DIS vs Farneback vs TV-L1, speed and accuracy"
    )
    p.add_argument("--video", type=Path, default=None, help="default: a generated demo video")
    p.add_argument("--pairs", type=_at_least(1), default=30, help="consecutive frame pairs")
    p.add_argument("--size", type=_width_x_height, default=(340, 256), help="WxH (340x256)")
    p.add_argument(
        "--methods", type=_flow_method_list, default=("dis", "farneback", "tvl1"), help="dis,..."
    )
    p.add_argument("--out-json", type=Path, default=Path("bench_flow.json"))
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_flow)


# -- bench scaling -----------------------------------------------------------------------------


def cmd_bench_scaling(args: argparse.Namespace) -> int:
    import dataclasses

    from vidscale.bench.scaling import measure
    from vidscale.bench.scaling.config import ScalingConfig
    from vidscale.bench.scaling.report import format_table

    # Every ScalingConfig field but the fast path's has a flag of the same name (`procs`:
    # --nproc); unset flags keep the config's default.
    names = [f.name for f in dataclasses.fields(ScalingConfig) if hasattr(args, f.name)]
    given = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.nproc is not None:
        given["procs"] = args.nproc
    given.pop("fast_path", None)
    models = given.get("models", ScalingConfig().models)
    fast = scaling_fast_path(args.fast_path, models)
    cfg = measure.resolve(ScalingConfig(**given, **fast), world=measure.torchrun_world())
    if args.worker_out is not None:  # a rank of a torchrun that `bench scaling` started
        measure.run_worker(cfg, args.worker_out)
        return 0
    _check_parent("--out-json", args.out_json)
    _check_parent("--plot", args.plot)
    if args.baseline is not None and not args.baseline.is_file():
        raise ConfigError(f"--baseline: {args.baseline} is not a file")
    try:
        with progress_to_stderr(args.json):
            result = measure.run(
                cfg, out_json=args.out_json, progress=True, plot=args.plot, baseline=args.baseline
            )
    except measure.ScalingRunFailed as err:  # not bad input: a run failed (its output above)
        print(f"vidscale: error: bench scaling: {err}", file=sys.stderr)
        return 1
    if result is not None and args.json:
        print_json_file(args.out_json)
    elif result is not None:  # rank 0
        print(format_table(result))
        print(f"wrote {args.out_json}, {args.plot}")
    return 0


def scaling_fast_path(entries: tuple[str, ...], models: tuple[str, ...]) -> dict[str, Any]:
    """`ScalingConfig`'s fast-path fields for `--fast-path`: `auto` leaves every model to the
    probe, `fp32` turns the fast path off, another single setting applies to every model,
    and `MODEL=SETTING` entries name theirs."""
    if entries == ("auto",):
        return {"fast_path": True, "fast_settings": ()}
    if entries == ("fp32",):
        return {"fast_path": False, "fast_settings": ()}
    if len(entries) == 1 and "=" not in entries[0]:
        entries = tuple(f"{name}={entries[0]}" for name in models)
    per_model = tuple(e for e in entries if not e.endswith("=auto"))
    return {"fast_path": True, "fast_settings": per_model}


def _add_bench_scaling(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser(
        "scaling",
        help="TSM paper Fig. 6: clips/s, speed-up and efficiency vs processes; each step "
        "split into compute, data wait and exposed communication",
    )
    p.add_argument(
        "--models", type=_name_list(), default=None, help="registered models (tsm_resnet50)"
    )
    p.add_argument(
        "--nproc",
        type=_int_list(1),
        default=None,
        help="process counts to launch, 1,2,4 (1, 2, 4, ... up to the cores, or the GPUs); "
        "under torchrun: its world size",
    )
    p.add_argument("--steps", type=_at_least(1), default=None, help="measured steps (8)")
    p.add_argument("--warmup", type=_at_least(0), default=None, help="untimed steps first (3)")
    p.add_argument("--batch", type=_at_least(1), default=None, help="clips per process (8)")
    p.add_argument("--frames", type=_at_least(1), default=None, help="frames per clip (8)")
    p.add_argument("--size", type=_at_least(32), default=None, help="frame side (224)")
    p.add_argument("--num-classes", type=_at_least(1), default=None, help="classes (400)")
    p.add_argument(
        "--threads", type=_at_least(0), default=None, help="threads per process (0: cores/max P)"
    )
    p.add_argument("--workers", type=_at_least(0), default=None, help="loader processes (0)")
    p.add_argument(
        "--hooks",
        type=_name_list(["none", "fp16", "bf16", "powersgd"]),
        default=None,
        help="DDP gradient hooks (none,bf16,powersgd)",
    )
    p.add_argument(
        "--strategies",
        type=_name_list(strategy_names()),
        default=None,
        help=f"({','.join(strategy_names())})",
    )
    p.add_argument("--aavg-k", type=_at_least(1), default=None, help="AAVG: steps per average (4)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None)
    p.add_argument("--bucket-cap-mb", type=_above(0), default=None, help="DDP buckets (25)")
    p.add_argument(
        "--fast-path",
        type=_fast_path_per_model,
        default=("auto",),
        metavar="SETTING|MODEL=SETTING,...",
        help="the fast path of every model (auto, fp32, fp32+cl, bf16, bf16+cl) or per model; "
        "auto: training's probe decides once, or the --baseline's (auto)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="an earlier JSON whose 1-process rows to compare with (under torchrun)",
    )
    p.add_argument(
        "--data",
        default=None,
        help="a dataset every process reads its training clips from, as `vidscale train` "
        "does (its classes set --num-classes); default: random clips in memory",
    )
    p.add_argument(
        "--source",
        choices=["videos", "shards", "stream"],
        default=None,
        help="with --data: decode its videos, or read a prepared directory (videos)",
    )
    p.add_argument(
        "--layout",
        choices=VIDEO_LAYOUTS,
        default=None,
        help="with --data and --source videos: the dataset's layout (generic)",
    )
    p.add_argument("--out-json", type=Path, default=Path("bench_scaling.json"))
    p.add_argument("--plot", type=Path, default=Path("bench_scaling.png"))
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_scaling)


# -- bench multigrid ---------------------------------------------------------------------------


def cmd_bench_multigrid(args: argparse.Namespace) -> int:
    from vidscale.bench import multigrid
    from vidscale.config import resolve
    from vidscale.fastpath.settings import Candidate
    from vidscale.recipes import get_recipe

    _check_parent("--out-json", args.out_json)
    _check_device(args.device)
    run_config = resolve(get_recipe(args.recipe), args.overrides)
    bench = multigrid.MultigridBenchConfig(
        world_size=args.world_size,
        dataset_size=args.dataset_size,
        variants=args.variants,
        warmup=args.warmup,
        repeats=args.repeats,
        steps=args.steps,
    )
    try:
        bench.validate()
        setting = None if args.fast_path == "auto" else Candidate.from_label(args.fast_path)
    except ValueError as err:
        raise ConfigError(f"bench multigrid: {err}") from err
    cfg = multigrid.MultigridConfig(args.recipe, run_config, bench, setting)
    with progress_to_stderr(args.json):
        result = multigrid.run(cfg, out_json=args.out_json, progress=True, device=args.device)
        print(multigrid.format_report(result))
        print(f"wrote {args.out_json}")
    if args.json:
        print_json_file(args.out_json)
    return 0


def _add_bench_multigrid(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser(
        "multigrid",
        help="multigrid's compute-time saving on this device: every shape of its plans timed",
    )
    p.add_argument("recipe", help="named recipe (see `vidscale recipes`)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--world-size", type=_at_least(1), default=1, help="processes of the run it describes (1)"
    )
    p.add_argument(
        "--dataset-size", type=_at_least(1), default=240_000, help="training videos (Kinetics-400)"
    )
    p.add_argument(
        "--variants",
        type=_name_list(["long", "short", "both"]),
        default=("long", "short", "both"),
        help="besides the baseline (long,short,both)",
    )
    p.add_argument(
        "--fast-path",
        choices=FAST_PATH_SETTINGS,
        default="auto",
        help="auto: what training's probe chooses at the base shape (auto)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--warmup", type=_at_least(0), default=1, help="untimed rounds")
    p.add_argument("--repeats", type=_at_least(1), default=5, help="timed rounds")
    p.add_argument("--steps", type=_at_least(1), default=2, help="calls per sample")
    p.add_argument("--out-json", type=Path, default=Path("bench_multigrid.json"))
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_multigrid)
