"""`vidscale bench network`: one node against two across a real link shaped to several rates
(as root; `vidscale.bench.network`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vidscale.cli.args import _at_least, _check_parent, _name_list
from vidscale.cli.output import add_json_flag, print_json_file, progress_to_stderr
from vidscale.errors import InputError


def cmd_bench_network(args: argparse.Namespace) -> int:
    from vidscale.bench.network.config import NetworkConfig
    from vidscale.bench.network.measure import run
    from vidscale.bench.network.report import format_table
    from vidscale.bench.scaling.measure import ScalingRunFailed

    _check_parent("--out-json", args.out_json)
    _check_parent("--plot", args.plot)
    if args.replan is not None:
        return _replan(args)
    cfg = NetworkConfig(
        rates=args.rates,
        models=args.models,
        batch=args.batch,
        frames=args.frames,
        size=args.size,
        steps=args.steps,
        warmup=args.warmup,
        hooks=args.hooks,
        aavg_k=args.aavg_k,
        epoch_k=args.epoch_k,
        fast_path=args.fast_path != "fp32",
    )
    try:
        with progress_to_stderr(args.json):
            result = run(cfg, out_json=args.out_json, plot=args.plot)
    except ScalingRunFailed as err:  # not bad input: a measurement failed (its output above)
        print(f"vidscale: error: bench network: {err}", file=sys.stderr)
        return 1
    if args.json:
        print_json_file(args.out_json)
    else:
        print(format_table(result))
        print(f"wrote {args.out_json}, {args.plot}")
    return 0


def _replan(args: argparse.Namespace) -> int:
    """`--replan FILE`: FILE's measurements with the planner's predictions made again."""
    from vidscale.bench.network.report import format_table, plot_network, read_result, replan
    from vidscale.bench.results import write_result

    if not args.replan.is_file():
        raise InputError(f"--replan: {args.replan} is not a file")
    result = replan(read_result(args.replan))
    write_result(args.out_json, result.to_dict())
    plot_network(result, args.plot)
    if args.json:
        print_json_file(args.out_json)
    else:
        print(format_table(result))
        print(f"wrote {args.out_json}, {args.plot}")
    return 0


def add_parser(bench_sub: argparse._SubParsersAction) -> None:
    """`bench network`'s flags."""
    from vidscale.bench.network.config import DEFAULT_MODELS, DEFAULT_RATES

    p = bench_sub.add_parser(
        "network",
        help="1 vs 2 nodes across a real link shaped to several rates (Fig. 3c; root)",
        description="Two network namespaces joined by a veth shaped with tc to each rate, one "
        "torchrun agent and one core per node: each model's step on one node and on two, with "
        "DDP (each hook) and AAVG, its efficiency, and the planner's prediction of the two-node "
        "step with its error. Needs root.",
    )
    p.add_argument(
        "--rates", type=_name_list(), default=DEFAULT_RATES, help="e.g. unshaped,500mbit"
    )
    p.add_argument("--models", type=_name_list(), default=DEFAULT_MODELS)
    p.add_argument("--batch", type=_at_least(1), default=2, help="clips per process")
    p.add_argument("--frames", type=_at_least(1), default=4)
    p.add_argument("--size", type=_at_least(32), default=112)
    p.add_argument("--steps", type=_at_least(1), default=4, help="measured steps per run")
    p.add_argument("--warmup", type=_at_least(2), default=2)
    p.add_argument(
        "--hooks",
        type=_name_list(("none", "fp16", "bf16", "powersgd")),
        default=("none", "bf16", "powersgd"),
        help="DDP gradient hooks",
    )
    p.add_argument("--aavg-k", type=_at_least(1), default=4, help="AAVG: steps per averaging")
    p.add_argument(
        "--epoch-k", type=_at_least(0), default=16, help="AAVG's 'an epoch' in steps (0: skip)"
    )
    p.add_argument("--fast-path", choices=["auto", "fp32"], default="auto")
    p.add_argument(
        "--replan",
        type=Path,
        default=None,
        metavar="FILE",
        help="measure nothing: FILE's rows predicted again by the planner as it is now",
    )
    p.add_argument("--out-json", type=Path, default=Path("bench_network.json"))
    p.add_argument("--plot", type=Path, default=Path("bench_network.png"))
    add_json_flag(p)
    p.set_defaults(fn=cmd_bench_network)
