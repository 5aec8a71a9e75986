"""One rank of a two-process test job, run as a fresh interpreter (plain launch or torchrun).

    python tests/distributed/peers/rank_script.py SCENARIO [--fail-rank R] [--cleanup-s S]

Every scenario joins the group through `init_distributed` and runs inside `fail_together`:

- fail: after one all-reduce, rank R raises; the other rank waits in a second all-reduce.
  Rank R then stays alive for S seconds with its sockets open (a slow cleanup), so only
  `fail_together` can end the other rank before then.
- kill: after one all-reduce, rank R SIGKILLs itself (no report; without torchrun it hosts
  the store when R is 0); the other rank waits in a second all-reduce.
- clean: both finish; rank 1 leaves its block 2 s after rank 0. Exit 0 on both.
- agreed: both raise `Agreed` (an `expected` exception), rank 1 2 s after rank 0. Exit 3.
- restart (under `torchrun --max-restarts 1`): in the first attempt rank 1 SIGKILLs itself
  after one all-reduce; in the second, rank 1 joins 2 s after rank 0, and both all-reduce.
- consequence: after one all-reduce, rank R raises; the other rank, whose watcher polls only
  every 60 s, raises an error of its own 2 s later, as a collective's closed connection would.
- freeze: after one all-reduce, rank R stops (SIGSTOP: alive, sockets open, silent, as a rank
  behind a link that went down) and is SIGKILLed S seconds later by a helper process; the other
  rank waits in a second all-reduce. Peers are lost after `FREEZE_SILENCE_S`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

import torch

from vidscale.distributed.collectives import all_reduce_sum
from vidscale.distributed.env import init_distributed, shutdown
from vidscale.distributed.peers.failure import fail_together

AGREED_EXIT_CODE = 3
POLL_S = 0.2
FREEZE_SILENCE_S = 2.0


class Agreed(Exception):
    """Raised by every rank at the same point, like a stop that the ranks agreed on."""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "scenario",
        choices=["fail", "kill", "clean", "agreed", "restart", "consequence", "freeze"],
    )
    parser.add_argument("--fail-rank", type=int, default=0)
    parser.add_argument("--cleanup-s", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if args.scenario == "restart" and attempt > 0 and rank == 1:
        # Rank 0 reaches the store first: through torch's own env:// rendezvous it would read
        # rank 1's gloo address of the first attempt, a process that no longer exists.
        time.sleep(2.0)
    env = init_distributed("cpu", timeout_s=30)
    try:
        poll_s = 60.0 if args.scenario == "consequence" else POLL_S
        with fail_together(env, expected=(Agreed,), poll_s=poll_s, silence_s=FREEZE_SILENCE_S):
            total = all_reduce_sum(torch.ones(1)).item()
            assert total == env.world_size, total
            if args.scenario == "consequence" and rank != args.fail_rank:
                time.sleep(2.0)
                raise RuntimeError("Connection closed by peer (a consequence)")
            if args.scenario in ("fail", "consequence") and rank == args.fail_rank:
                print(f"rank {rank} failing at {time.time():.3f}", flush=True)
                raise RuntimeError("planted failure")
            if (args.scenario == "kill" and rank == args.fail_rank) or (
                args.scenario == "restart" and attempt == 0 and rank == 1
            ):
                print(f"rank {rank} failing at {time.time():.3f}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if args.scenario == "freeze" and rank == args.fail_rank:
                reaper = f"sleep {args.cleanup_s}; kill -9 {os.getpid()}"
                subprocess.Popen(["sh", "-c", reaper], start_new_session=True)
                print(f"rank {rank} failing at {time.time():.3f}", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            if args.scenario in ("clean", "agreed") and rank == 1:
                time.sleep(2.0)
            if args.scenario == "agreed":
                raise Agreed
            all_reduce_sum(torch.ones(1))
    except RuntimeError:
        if rank == args.fail_rank:
            time.sleep(args.cleanup_s)
        raise
    except Agreed:
        return AGREED_EXIT_CODE
    finally:
        shutdown()
    print(f"rank {rank} attempt {attempt} ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
