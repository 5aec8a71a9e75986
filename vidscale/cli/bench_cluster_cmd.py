"""`vidscale bench cluster`: efficiency against the number of nodes (2 to 16) on a cluster's
network on one machine, with stand-in ranks (as root; `vidscale.bench.cluster`), and
`--combine`, which joins recorded results without measuring (no root)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from vidscale.bench.cluster.report import ClusterResult


def cmd_bench_cluster(args: argparse.Namespace) -> int:
    from vidscale.bench.cluster.config import ClusterConfig
    from vidscale.bench.cluster.measure import ClusterRunFailed, run
    from vidscale.netlab.link import ending_on_sigterm

    _check_parent("--out-json", args.out_json)
    args.plot = plot_path(args)
    _check_parent("--plot", args.plot)
    if args.check_against is not None and not args.check_against.is_file():
        raise InputError(f"--check-against: {args.check_against} is not a file")
    if args.check_against is not None and args.json:
        raise InputError("--check-against: its table is for a person; leave out --json")
    if args.combine is not None:
        return _combine(args)
    cfg = config_from_args(ClusterConfig, args)
    try:
        with progress_to_stderr(args.json), ending_on_sigterm():
            result = run(cfg, out_json=args.out_json, plot=args.plot)
    except ClusterRunFailed as err:  # not bad input: every pass failed (rank 0's lines in it)
        print(f"vidscale: error: bench cluster: {err}", file=sys.stderr)
        return 1
    return _show(args, result)


def _combine(args: argparse.Namespace) -> int:
    """`--combine A.json B.json ...`: the recorded results joined, each row predicted again by
    the planner as it is now (`report.combine`, `report.replan`), written and shown."""
    from vidscale.bench.cluster.report import ClusterResult, combine, plot_cluster, replan
    from vidscale.bench.results import write_result

    for path in args.combine:
        if not path.is_file():
            raise InputError(f"--combine: {path} is not a file")
    result = replan(combine([ClusterResult.read(path) for path in args.combine]))
    write_result(args.out_json, result.to_dict())
    plot_cluster(result, args.plot)
    return _show(args, result)


def _show(args: argparse.Namespace, result: ClusterResult) -> int:
    """`result` as its JSON (`--json`) or its table, with `--check-against`'s under it."""
    from vidscale.bench.cluster.report import format_standin_check, format_table

    if args.json:
        print_json_file(args.out_json)
        return 0
    print(format_table(result))
    if args.check_against is not None:
        print()
        print(format_standin_check(result, args.check_against))
    print(f"wrote {args.out_json}, {args.plot}")
    return 0


def add_parser(bench_sub: argparse._SubParsersAction) -> None:
    """`bench cluster`'s flags: `ClusterConfig`'s fields, `--combine`, `--check-against`, the
    JSON and the plot."""
    from vidscale.bench.cluster.config import ClusterConfig

    p = bench_sub.add_parser(
        "cluster",
        help="efficiency vs nodes (2-16) on one bridge, stand-in ranks (Table 3 in miniature; root)",
        description="N network namespaces on one bridge, every node's link shaped with tc to "
        "each rate, one stand-in rank per node (the real model's parameters and DDP buckets; "
        "its compute waits the one-node step of --baseline): each model's step with DDP (each "
        "hook) and AAVG, its efficiency against one node, and the planner's prediction with "
        "its error; optionally a straggler (one node's link, then its compute, slower) and "
        "two racks joined by a slower trunk. "
        "Needs root, but --combine does not.",
    )
    add_config_flags(p, ClusterConfig)
    p.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        default=None,
        metavar="FILE",
        help="measure nothing: join these results, each row predicted again by the planner "
        "as it is now; the config flags are not used",
    )
    p.add_argument(
        "--check-against",
        type=Path,
        default=None,
        metavar="FILE",
        help="a bench network JSON: each two-node stand-in step beside its real two-node step, the "
        "difference split into the communication each waited and each one's compute over the "
        "control (the real AAVG rows averaging once an epoch)",
    )
    add_output_flags(p, out_json="bench_cluster.json", device=False)
    add_plot_flag(p)
    p.set_defaults(fn=cmd_bench_cluster)
