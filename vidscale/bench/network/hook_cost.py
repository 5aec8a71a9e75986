"""What a gradient hook costs one process in compute, measured on one process: the planner's
input for the hooks whose work is not communication (PowerSGD's matrix products and
orthogonalisation, the bf16 hook's casts).

    python -m vidscale.bench.network.hook_cost --out FILE [--setting S] MODEL FRAMES SIZE BATCH CLASSES HOOK...

The model with the fast path's setting the two-node runs use (`--setting`: bf16 autocast,
channels-last weights, whose gradients PowerSGD must reshape), under DistributedDataParallel
in a one-rank group (`distributed.sync.one_rank`), wrapped as training wraps it, trains the same random batch (the benchmark subject, `fastpath.subject`) for `WARMUP + STEPS`
steps once plainly and once per hook (`attach_comm_hook`; PowerSGD compressing from its second
step, as `bench scaling` runs it). The all-reduces of a one-rank group move nothing, so each
hook's median step minus the plain median step is what the hook computes per step. Written as
JSON {"plain_step_s": s, "hook_compute_s": {hook: s}}.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from vidscale.distributed.sync.comm_hooks import CommConfig, attach_comm_hook
from vidscale.distributed.sync.one_rank import one_rank_ddp
from vidscale.fastpath.settings import Candidate
from vidscale.fastpath.subject import ProbeShape, Subject
from vidscale.models.registry import ModelConfig, build_model

STEPS = 6
WARMUP = 3


def _median_step(args: argparse.Namespace, hook: str) -> float:
    subject = Subject.build(  # as the two-node runs train it: their setting, the same batch
        functools.partial(
            build_model, ModelConfig(name=args.model, num_classes=args.classes, frames=args.frames)
        ),
        setting=Candidate.from_label(args.setting),
        shape=ProbeShape(args.batch, 3, args.frames, args.size, args.classes),
        device=torch.device("cpu"),
    )
    with one_rank_ddp(subject.model, bucket_cap_mb=args.bucket_cap_mb) as ddp:
        if hook != "none":
            comm = CommConfig(hook=hook, bucket_cap_mb=args.bucket_cap_mb, powersgd_start_step=2)  # type: ignore[arg-type]
            attach_comm_hook(ddp, comm)
        subject.through(ddp)
        times = []
        for index in range(WARMUP + STEPS):
            start = time.perf_counter()
            subject()
            if index >= WARMUP:
                times.append(time.perf_counter() - start)
    subject.applied.check(f"{args.model} at {args.setting} with hook {hook}")
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--setting", default="fp32", help="the fast path's: fp32, bf16+cl, ...")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("model")
    parser.add_argument("frames", type=int)
    parser.add_argument("size", type=int)
    parser.add_argument("batch", type=int)
    parser.add_argument("classes", type=int)
    parser.add_argument("hooks", nargs="+")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    plain = _median_step(args, "none")
    costs = {h: max(0.0, _median_step(args, h) - plain) for h in args.hooks if h != "none"}
    args.out.write_text(json.dumps({"plain_step_s": plain, "hook_compute_s": costs}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
