#!/usr/bin/env python3
"""N nodes (2 to 16) on one switch over real, shaped links on this machine (as root): hold the
network up for other programs, or run a command as an N-node torchrun job on it.

    sudo .venv/bin/python scripts/cluster_nodes.py --nodes 4 --rate 1gbit --hold \\
        --describe cluster.json          # up until Ctrl-C or SIGTERM; cluster.json says where
    sudo .venv/bin/python scripts/cluster_nodes.py --nodes 8 --rate 1gbit --racks 2 \\
        --trunk 2gbit --slow-node 5 --slow-rate 100mbit -- train --recipe ...

Makes the nodes' namespaces, a bridge in a namespace of its own, and one veth per node shaped
to `--rate` both ways (`vidscale.netlab.cluster`); with `--racks 2` the nodes are split over two
bridges joined by a trunk shaped to `--trunk`; with `--host-port` this machine's own namespace
gets an unshaped port on the switch (a scheduler's controller there reaches every node).
`--describe` writes the nodes' namespaces, interfaces and addresses as JSON once all is up.

With a command after `--`, one torchrun agent runs per node (`vidscale.netlab.nodes`), node K on
core K mod 2, and a node whose agent fails ends the job. Everything is removed at the end, also
on an error, Ctrl-C or SIGTERM; a harness killed outright leaves namespaces the next one sweeps.
Each node's output is in `--log-dir`/node{K}.log; the exit code is the first failing agent's.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vidscale.errors import InputError
from vidscale.netlab import nodes
from vidscale.netlab.cluster import Cluster
from vidscale.netlab.link import Rate, unavailable


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--nodes", type=int, required=True, help="2 to 16")
    parser.add_argument("--rate", default="unshaped", help="each node's link, e.g. 1gbit")
    parser.add_argument("--racks", type=int, default=1, help="1, or 2 joined by --trunk")
    parser.add_argument("--trunk", default="unshaped", help="the racks' trunk, e.g. 2gbit")
    parser.add_argument("--slow-node", type=int, default=None, help="a straggler's link: node")
    parser.add_argument("--slow-rate", default=None, help="... and its rate")
    parser.add_argument("--host-port", action="store_true", help="this namespace on the switch")
    parser.add_argument("--describe", type=Path, default=None, help="write the layout as JSON")
    parser.add_argument("--hold", action="store_true", help="stay up until Ctrl-C or SIGTERM")
    parser.add_argument("--nproc", type=int, default=1, help="processes per node")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    parser.add_argument("--log-dir", type=Path, default=Path("cluster_logs"))
    parser.add_argument("--timeout", type=float, default=None, help="s before the job is ended")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if args.hold == bool(command):
        raise InputError("cluster_nodes.py: either --hold or a vidscale command after --")
    if (args.slow_node is None) != (args.slow_rate is None):
        raise InputError("--slow-node and --slow-rate: give both or neither")
    if args.slow_node is not None and not 0 <= args.slow_node < args.nodes:
        raise InputError(f"--slow-node {args.slow_node}: nodes are 0 to {args.nodes - 1}")
    for rate in (args.rate, args.trunk, args.slow_rate):
        if rate is not None:
            Rate.parse(rate)  # a bad one named before anything is made
    return args, command


def layout(cluster: Cluster) -> dict[str, object]:
    """What another program needs to use the cluster (written by `--describe`)."""
    return {
        "nodes": [
            {
                "namespace": ns,
                "netns_path": f"/run/netns/{ns}",
                "device": dev,
                "address": address,
                "rack": cluster.rack_of(k),
                "rate": cluster.rates[k].label,
            }
            for k, (ns, dev, address) in enumerate(
                zip(cluster.namespaces, cluster.devices, cluster.addresses, strict=True)
            )
        ],
        "switch_namespace": cluster.switch,
        "host_address": cluster.host_address,
        "trunk_rate": cluster.trunk_rate.label if cluster.racks == 2 else None,
    }


def run(args: argparse.Namespace, command: list[str]) -> int:
    trunk = Rate.parse(args.trunk) if args.racks == 2 else None
    with Cluster(
        args.nodes,
        rate=Rate.parse(args.rate),
        racks=args.racks,
        trunk=trunk,
        host_port=args.host_port,
    ) as cluster:
        if args.slow_node is not None:
            cluster.shape(Rate.parse(args.slow_rate), node=args.slow_node)
        if args.describe is not None:
            # Whole or absent: a program waiting for the file never reads half of it.
            partial = args.describe.with_name(args.describe.name + ".partial")
            partial.write_text(json.dumps(layout(cluster), indent=1) + "\n")
            partial.replace(args.describe)
        rates = ", ".join(sorted({rate.label for rate in cluster.rates}))
        print(f"cluster_nodes: {args.nodes} nodes, links {rates}", flush=True)
        if args.hold:
            signal.pause()  # until a signal's handler ends it
            return 0
        start = time.monotonic()
        job = nodes.start(
            cluster,
            command,
            log_dir=args.log_dir,
            threads=args.threads,
            nproc=args.nproc,
        )
        try:
            codes = job.wait(args.timeout, kill_on_bad_exit=True)
        finally:
            job.stop()
    print(f"cluster_nodes: agents exited {codes} after {time.monotonic() - start:.1f} s")
    return next((code for code in codes if code), 0)


def main(argv: list[str]) -> int:
    def end(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)  # unwinds through the job's and the cluster's cleanup

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    try:
        args, command = parse(argv)
        reason = unavailable()
        if reason is not None:
            print(f"cluster_nodes: {reason}", file=sys.stderr)
            return 2
        return run(args, command)
    except InputError as err:
        print(f"cluster_nodes: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
