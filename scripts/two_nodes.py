#!/usr/bin/env python3
"""Run a vidscale command as a two-node job over a real, shaped link on this machine (as root).

    sudo .venv/bin/python scripts/two_nodes.py --rate 500mbit -- train --recipe demo_tsm_r18_8f_b32_e12 \\
        --set data.root=demo_data --set data.batch_size=16
    sudo .venv/bin/python scripts/two_nodes.py --rate 1gbit --down-at 60 --down-for 40 \\
        --max-restarts 3 -- train ...   # the link pulled for 40 s at 60 s; torchrun restarts

Makes two network namespaces joined by a veth pair shaped to `--rate` in each direction
(`vidscale.netlab.link`), starts one torchrun agent per namespace, each pinned to one core with
`--nproc` workers (`vidscale.netlab.nodes`), and waits. A node whose agent fails ends the job,
as a scheduler ends a job whose task failed (`srun --kill-on-bad-exit`). The namespaces, the
link and every process are removed at the end, also on an error, Ctrl-C or SIGTERM. Each node's
output is in `--log-dir`/node{0,1}.log; the exit code is the first failing agent's, else 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vidscale.netlab import nodes
from vidscale.netlab.link import Rate, TwoNodeLink, unavailable


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("two_nodes.py: put the vidscale command after --")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="unshaped", help="link rate each way, e.g. 500mbit")
    parser.add_argument("--nproc", type=int, default=1, help="processes per node")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    parser.add_argument("--max-restarts", type=int, default=0, help="torchrun's, per agent")
    parser.add_argument("--down-at", type=float, default=None, help="s after start: link down")
    parser.add_argument("--down-for", type=float, default=None, help="s down (default: stays)")
    parser.add_argument("--log-dir", type=Path, default=Path("two_nodes_logs"))
    parser.add_argument("--timeout", type=float, default=None, help="s before the job is ended")
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def _pull_cable(
    link: TwoNodeLink, at: float, down_for: float | None, stop: threading.Event
) -> None:
    if stop.wait(at):
        return
    link.set_up(False)
    print(f"two_nodes: link down at {at:g} s", flush=True)
    if down_for is not None and not stop.wait(down_for):
        link.set_up(True)
        print(f"two_nodes: link up again after {down_for:g} s", flush=True)


def main(argv: list[str]) -> int:
    args, command = parse(argv)
    reason = unavailable()
    if reason is not None:
        print(f"two_nodes: {reason}", file=sys.stderr)
        return 2
    rate = Rate.parse(args.rate)

    def end(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)  # unwinds through the job's and the link's cleanup

    signal.signal(signal.SIGTERM, end)
    stop = threading.Event()
    with TwoNodeLink() as link:
        link.shape(rate)
        print(f"two_nodes: 2 nodes, link {rate.label}, logs in {args.log_dir}", flush=True)
        start = time.monotonic()
        job = nodes.start(
            link,
            command,
            log_dir=args.log_dir,
            threads=args.threads,
            nproc=args.nproc,
            max_restarts=args.max_restarts,
        )
        if args.down_at is not None:
            threading.Thread(
                target=_pull_cable, args=(link, args.down_at, args.down_for, stop), daemon=True
            ).start()
        try:
            codes = job.wait(args.timeout, kill_on_bad_exit=True)
        finally:
            stop.set()
            job.stop()
    print(f"two_nodes: agents exited {codes} after {time.monotonic() - start:.1f} s")
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
