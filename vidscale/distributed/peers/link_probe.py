"""A link as gloo's all-reduce sees it: the time of a small all-reduce (the per-message cost)
and the bandwidth of large ones, measured by the two ranks of a two-node job (`vidscale.netlab.nodes`).

    python -m vidscale.distributed.peers.link_probe --out FILE    (as each node's torchrun worker)

The TSM paper's Eq. 1 (§3c) prices communication as latency + size / bandwidth; these are its
two numbers for this link and this collective library, one process per node with one thread.
`latency_s` is the median of `SMALL_REPS` all-reduces of 8 floats; `bytes_per_s` is the slope
between all-reduces of 4 MB and 40 MB (each node sends 2(P-1)/P of the buffer in a ring, the
buffer itself at P = 2), so that the fixed costs cancel. Rank 0 writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

SMALL_REPS = 100
SIZES = (1_000_000, 10_000_000)  # floats: 4 MB and 40 MB


def _median_s(numel: int, reps: int) -> float:
    buffer = torch.ones(numel)
    for _ in range(2):
        dist.all_reduce(buffer)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        dist.all_reduce(buffer)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        world = dist.get_world_size()
        latency = _median_s(8, SMALL_REPS)
        small, large = (_median_s(n, 5) for n in SIZES)
        ring = 2 * (world - 1) / world  # of the buffer each node sends
        sent = ring * 4 * (SIZES[1] - SIZES[0])
        found = {
            "latency_s": latency,
            "bytes_per_s": sent / max(large - small, 1e-9),
            "allreduce_s": {str(4 * n): t for n, t in zip(SIZES, (small, large), strict=True)},
        }
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if int(__import__("os").environ.get("RANK", "0")) == 0:
        args.out.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
