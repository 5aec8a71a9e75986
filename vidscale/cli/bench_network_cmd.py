"""`vidscale bench network`: one node against two across a real link shaped to several rates
(as root; `vidscale.bench.network`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vidscale.cli.args import _check_parent
from vidscale.cli.flags import (
    add_config_flags,
    add_output_flags,
    add_plot_flag,
    config_from_args,
    plot_path,
)
from vidscale.cli.output import print_json_file, progress_to_stderr
from vidscale.errors import InputError

SKIP = ("fast_path",)  # --fast-path auto|fp32


def cmd_bench_network(args: argparse.Namespace) -> int:
    from vidscale.bench.network.config import NetworkConfig
    from vidscale.bench.network.measure import run
    from vidscale.bench.network.report import format_table
    from vidscale.bench.scaling.measure import ScalingRunFailed
    from vidscale.netlab.link import ending_on_sigterm

    _check_parent("--out-json", args.out_json)
    args.plot = plot_path(args)
    _check_parent("--plot", args.plot)
    if args.replan is not None:
        return _replan(args)
    if args.replan_compute != "one_process":
        raise InputError("--replan-compute: only with --replan FILE")
    base = NetworkConfig(fast_path=args.fast_path != "fp32")
    cfg = config_from_args(NetworkConfig, args, skip=SKIP, base=base)
    try:
        with progress_to_stderr(args.json), ending_on_sigterm():  # a SIGTERM takes the link down
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
    result = replan(read_result(args.replan), compute=args.replan_compute)
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
    from vidscale.bench.network.config import REPLAN_COMPUTE, NetworkConfig

    p = bench_sub.add_parser(
        "network",
        help="1 vs 2 nodes across a real link shaped to several rates (Fig. 3c; root)",
        description="Two network namespaces joined by a veth shaped with tc to each rate, one "
        "torchrun agent and one core per node: each model's step on one node and on two, with "
        "DDP (each hook) and AAVG, its efficiency, and the planner's prediction of the two-node "
        "step with its error. Needs root.",
    )
    add_config_flags(p, NetworkConfig, skip=SKIP)
    p.add_argument(
        "--fast-path",
        choices=["auto", "fp32"],
        default="auto",
        help="auto: training's probe decides per model; fp32: off (auto)",
    )
    p.add_argument(
        "--replan",
        type=Path,
        default=None,
        metavar="FILE",
        help="measure nothing: FILE's rows predicted again by the planner as it is now",
    )
    p.add_argument(
        "--replan-compute",
        choices=REPLAN_COMPUTE,
        default="one_process",
        help="with --replan: the compute step the planner starts from, one process alone (as "
        "for a cluster) or two nodes in lockstep on this machine, as the two-node rows "
        "computed (one_process)",
    )
    add_output_flags(p, out_json="bench_network.json", device=False)
    add_plot_flag(p)
    p.set_defaults(fn=cmd_bench_network)
