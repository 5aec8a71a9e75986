"""`vidscale train-ft`: one replica group of a fault-tolerant run (docs/fault_tolerance.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from vidscale.cli.args import _add_config_args, resolve_config
from vidscale.cli.output import add_json_flag, print_json

#: Exit status of a group that stopped because the lighthouse did (no quorum can form).
LIGHTHOUSE_LOST_EXIT_CODE = 3
#: Exit status of a group whose quorum or collective outlasted `--timeout` (the lighthouse alive).
QUORUM_TIMEOUT_EXIT_CODE = 4


def cmd_train_ft(args: argparse.Namespace) -> int:
    from vidscale.distributed.ft.settings import FTSettings, require_torchft

    settings = FTSettings(
        lighthouse=args.lighthouse,
        group=args.group,
        groups=args.groups,
        min_groups=args.min_groups,
        timeout_s=args.timeout,
        average_every=args.average_every,
        moments_every=args.moments_every,
        averager=args.averager,
        address=args.address,
    )
    settings.check()
    require_torchft()
    cfg = resolve_config(args)
    from vidscale.train.ft.training import LighthouseLost, train_ft

    try:
        last = train_ft(cfg, settings, args.out)
    except LighthouseLost as err:
        print(f"vidscale: group {args.group}: {err}", file=sys.stderr)
        return LIGHTHOUSE_LOST_EXIT_CODE
    except TimeoutError as err:
        # TorchFT's quorum and collectives raise TimeoutError, an OSError the error boundary
        # would report as a bad path: it is the run's failure, not the user's input.
        status = " ".join(str(err).split(", details:")[0].split())
        print(
            f"vidscale: group {args.group}: no quorum or collective within --timeout "
            f"{settings.timeout_s:g} s ({status}); the lighthouse accepts connections, so a "
            "peer, the link or the lighthouse is slow: a larger --timeout rides out a slow one",
            file=sys.stderr,
        )
        return QUORUM_TIMEOUT_EXIT_CODE
    if args.json and os.environ.get("RANK", "0") == "0":
        print_json({k: v for k, v in last.items() if k != "share"})
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `train-ft` sub-command."""
    p = sub.add_parser(
        "train-ft",
        help="train as one replica group of a fault-tolerant run (TorchFT; the `ft` extra)",
    )
    _add_config_args(p)
    p.add_argument("--out", type=Path, required=True, help="run directory (shared by the groups)")
    p.add_argument(
        "--lighthouse", required=True, metavar="HOST:PORT", help="the torchft_lighthouse address"
    )
    p.add_argument(
        "--address",
        metavar="IP",
        help="this node's address, which the group's manager binds and advertises to the "
        "lighthouse and its peers (one group per node; its store's address is torchrun's "
        "--local-addr; default: the host's name, bound to every interface)",
    )
    p.add_argument("--group", type=int, required=True, help="this replica group's index, from 0")
    p.add_argument("--groups", type=int, required=True, help="how many replica groups the run has")
    p.add_argument(
        "--min-groups",
        type=int,
        default=1,
        help="the fewest live groups that may commit a step (default 1)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="bound on each collective, quorum and state transfer (default 30)",
    )
    p.add_argument(
        "--average-every",
        type=int,
        default=0,
        metavar="K",
        help="0 (default): synchronous steps; K: local steps, replicas averaged every K",
    )
    p.add_argument(
        "--averager",
        default="aavg",
        choices=["aavg", "localsgd"],
        help="with --average-every: aavg (parameters, BN statistics, moments; default) or "
        "localsgd (TorchFT's LocalSGD: parameters only)",
    )
    p.add_argument(
        "--moments-every",
        type=int,
        default=0,
        metavar="M",
        help="aavg: average the optimizer's moments every M steps, a multiple of K "
        "(DES-LOC; default 0: every K)",
    )
    add_json_flag(p)
    p.set_defaults(fn=cmd_train_ft)
