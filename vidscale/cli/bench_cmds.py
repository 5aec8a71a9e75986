"""`vidscale bench data`, `data-wait`, `models`, `flow`, `scaling` and `multigrid` (`network` and
`cluster` in their own modules): the benchmarks
(each prints a table and writes JSON; with `--json` it prints that JSON instead). Their parsers
and commands; each bench's flags are derived from its config (`cli.flags`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vidscale.cli import bench_cluster_cmd, bench_gpu_cmds, bench_network_cmd
from vidscale.cli.args import (
    FAST_PATH_SETTINGS,
    _check_device,
    _check_dir,
    _check_model,
    _check_parent,
    _fast_path_per_model,
    _name_list,
    _width_x_height,
)
from vidscale.cli.flags import (
    add_config_flags,
    add_output_flags,
    add_plot_flag,
    config_from_args,
    plot_path,
)
from vidscale.cli.output import print_json_file, progress_to_stderr
from vidscale.config import ConfigError

if TYPE_CHECKING:
    from vidscale.bench.compute.models import Mode, ModelsConfig

# The fields each command sets another way than by a derived flag.
DATA_SKIP = ("clips", "generate")  # every clip kind; the videos of --preset, --count, --seconds
VIDEOS_SKIP = ("fps", "width", "height", "gops", "crf")  # --preset's own
MODELS_SKIP = ("modes",)  # --fast-path auto,fp32
FLOW_SKIP = ("width", "height", "shift")  # --size WxH; the accuracy test's fixed translation
SCALING_SKIP = ("fast_path", "fast_settings")  # --fast-path SETTING|MODEL=SETTING,...


def cmd_bench_data(args: argparse.Namespace) -> int:
    from vidscale.bench.data import dataload
    from vidscale.bench.data.bench_videos import PRESETS, BenchVideoSpec

    generate = config_from_args(BenchVideoSpec, args, skip=VIDEOS_SKIP, base=PRESETS[args.preset])
    cfg = config_from_args(
        dataload.DataConfig, args, skip=DATA_SKIP, base=dataload.DataConfig(generate=generate)
    )
    _check_dir("--videos", cfg.videos)
    _check_parent("--out-json", args.out_json)
    with progress_to_stderr(args.json):
        result = dataload.run(cfg, out_json=args.out_json)
        print(dataload.format_data_table(result.rows))
        print(dataload.format_gains(result.rows))
    if args.json:
        print_json_file(args.out_json)
    return 0


def cmd_bench_data_wait(args: argparse.Namespace) -> int:
    from vidscale.bench.data import data_wait

    cfg = config_from_args(data_wait.DataWaitConfig, args)
    _check_model("--model", cfg.model)
    _check_dir("--videos", cfg.videos)
    _check_parent("--out-json", args.out_json)
    with progress_to_stderr(args.json):
        data_wait.run(cfg, out_json=args.out_json, progress=True)
    if args.json:
        print_json_file(args.out_json)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `bench` sub-command and its own sub-commands, in `vidscale bench --help` order."""
    from vidscale.bench.data.bench_videos import BenchVideoSpec
    from vidscale.bench.data.data_wait import DataWaitConfig
    from vidscale.bench.data.dataload import DataConfig

    bench = sub.add_parser("bench", help="benchmarks: print a table, write JSON")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    p = bench_sub.add_parser("data", help="clips/s and CPU ms per clip: raw H.264 vs shards")
    add_config_flags(p, DataConfig, skip=DATA_SKIP)
    p.add_argument(
        "--preset",
        choices=["default", "k400"],
        default="default",
        help="generated videos: 340x256 CRF 23, GOP 250 and 16; k400: 456x256 CRF 21, GOP 250",
    )
    add_config_flags(p, BenchVideoSpec, skip=VIDEOS_SKIP)
    add_output_flags(p, out_json="bench_data.json", device=False)
    p.set_defaults(fn=cmd_bench_data)
    p = bench_sub.add_parser("data-wait", help="share of step time blocked on data (Fig. 3b)")
    add_config_flags(p, DataWaitConfig)
    add_output_flags(p, out_json="bench_data_wait.json", device=False)
    p.set_defaults(fn=cmd_bench_data_wait)
    _add_bench_models(bench_sub)
    _add_bench_flow(bench_sub)
    _add_bench_scaling(bench_sub)
    bench_network_cmd.add_parser(bench_sub)
    bench_cluster_cmd.add_parser(bench_sub)
    _add_bench_multigrid(bench_sub)
    bench_gpu_cmds.add_parsers(bench_sub)


# -- bench models ------------------------------------------------------------------------------


def _bench_models_config(args: argparse.Namespace) -> ModelsConfig:
    from vidscale.bench.compute.models import DEFAULT_MODELS, BenchConfig, ModelsConfig

    # "fast" rows run what `auto` chooses; fp32 rows, when asked for too, come first.
    rows: tuple[tuple[Mode, str], ...] = (("fp32", "fp32"), ("fast", "auto"))
    modes = tuple(mode for mode, name in rows if name in args.fast_path)
    base = BenchConfig.quick() if args.quick else BenchConfig()
    settings = config_from_args(BenchConfig, args, skip=MODELS_SKIP, base=base)
    chosen = ModelsConfig(
        tuple(args.models or DEFAULT_MODELS), settings=replace(settings, modes=modes)
    )
    return config_from_args(ModelsConfig, args, skip=("models", "settings"), base=chosen)


def cmd_bench_models(args: argparse.Namespace) -> int:
    from vidscale.bench.compute import models
    from vidscale.bench.compute.models_table import format_report

    cfg = _bench_models_config(args)
    _check_parent("--out-json", args.out_json)
    models.check_request(cfg)
    _check_device(args.device)
    result = models.run(cfg, out_json=args.out_json, progress=True, device=args.device)
    if args.json:
        print_json_file(args.out_json)
        return 0
    print(format_report(result))
    print(f"wrote {args.out_json}")
    return 0


def _add_bench_models(bench_sub: argparse._SubParsersAction) -> None:
    from vidscale.bench.compute.models import BenchConfig, ModelsConfig

    p = bench_sub.add_parser(
        "models", help="TSM paper Tables 1-2: cost, speed, utilisation, frames per stage"
    )
    p.add_argument(
        "models", nargs="*", metavar="MODELS", help="default: TSM, TSN, I3D 3x1x1, I3D 3x3x3"
    )
    add_config_flags(p, ModelsConfig, skip=("models", "settings"))
    add_config_flags(p, BenchConfig, skip=MODELS_SKIP)
    p.add_argument(
        "--fast-path",
        type=_name_list(["auto", "fp32"]),
        default=("auto",),
        help="rows to time: auto (what training's probe chooses), fp32, or auto,fp32 (auto)",
    )
    p.add_argument(
        "--quick", action="store_true", help="tiny settings for a smoke test; flags given win"
    )
    add_output_flags(p, out_json="bench_models.json")
    p.set_defaults(fn=cmd_bench_models)


# -- bench flow --------------------------------------------------------------------------------


def cmd_bench_flow(args: argparse.Namespace) -> int:
    from vidscale.bench.data import flow

    width, height = args.size
    base = flow.FlowConfig(width=width, height=height)
    cfg = config_from_args(flow.FlowConfig, args, skip=FLOW_SKIP, base=base)
    if cfg.video is not None and not cfg.video.is_file():
        raise ConfigError(f"--video: {cfg.video} is not a file")
    _check_parent("--out-json", args.out_json)
    with progress_to_stderr(args.json):
        result = flow.run(cfg, out_json=args.out_json)
    if args.json:
        print_json_file(args.out_json)
        return 0
    print(flow.format_flow_table(result))
    print(f"wrote {args.out_json}")
    return 0


def _add_bench_flow(bench_sub: argparse._SubParsersAction) -> None:
    from vidscale.bench.data.flow import FlowConfig

    p = bench_sub.add_parser(
        "flow", help="optical flow per CPU core: DIS vs Farneback vs TV-L1, speed and accuracy"
    )
    add_config_flags(p, FlowConfig, skip=FLOW_SKIP)
    p.add_argument("--size", type=_width_x_height, default=(340, 256), help="WxH (340x256)")
    add_output_flags(p, out_json="bench_flow.json", device=False)
    p.set_defaults(fn=cmd_bench_flow)


# -- bench scaling -----------------------------------------------------------------------------


def cmd_bench_scaling(args: argparse.Namespace) -> int:
    from vidscale.bench.scaling import measure
    from vidscale.bench.scaling.config import ScalingConfig
    from vidscale.bench.scaling.report import format_table

    given = config_from_args(ScalingConfig, args, skip=SCALING_SKIP)
    fast = scaling_fast_path(args.fast_path, given.models)
    cfg = measure.resolve(replace(given, **fast), world=measure.torchrun_world())
    if args.worker_out is not None:  # a rank of a torchrun that `bench scaling` started
        measure.run_worker(cfg, args.worker_out)
        return 0
    _check_parent("--out-json", args.out_json)
    args.plot = plot_path(args)
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
    from vidscale.bench.scaling.config import ScalingConfig

    p = bench_sub.add_parser(
        "scaling",
        help="TSM paper Fig. 6: clips/s, speed-up and efficiency vs processes; each step "
        "split into compute, data wait and exposed communication",
    )
    add_config_flags(p, ScalingConfig, skip=SCALING_SKIP)
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
    add_output_flags(p, out_json="bench_scaling.json", device=False)
    add_plot_flag(p)
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
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
    bench = config_from_args(multigrid.MultigridBenchConfig, args)
    bench.validate()
    # --fast-path's choices are the candidates' labels, so `from_label` cannot refuse one.
    setting = None if args.fast_path == "auto" else Candidate.from_label(args.fast_path)
    cfg = multigrid.MultigridConfig(args.recipe, run_config, bench, setting)
    with progress_to_stderr(args.json):
        result = multigrid.run(cfg, out_json=args.out_json, progress=True, device=args.device)
        print(multigrid.format_report(result))
        print(f"wrote {args.out_json}")
    if args.json:
        print_json_file(args.out_json)
    return 0


def _add_bench_multigrid(bench_sub: argparse._SubParsersAction) -> None:
    from vidscale.bench.multigrid import MultigridBenchConfig

    p = bench_sub.add_parser(
        "multigrid",
        help="multigrid's compute-time saving on this device: every shape of its plans timed",
    )
    p.add_argument("recipe", help="named recipe (see `vidscale recipes`)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    add_config_flags(p, MultigridBenchConfig)
    p.add_argument(
        "--fast-path",
        choices=FAST_PATH_SETTINGS,
        default="auto",
        help="auto: what training's probe chooses at the base shape (auto)",
    )
    add_output_flags(p, out_json="bench_multigrid.json")
    p.set_defaults(fn=cmd_bench_multigrid)
