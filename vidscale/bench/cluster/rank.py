"""One stand-in rank of `vidscale bench cluster`, started by torchrun on every node:

    python -m vidscale.bench.cluster.rank SPEC.json OUT.json

For each model of the spec and each variant (DDP with a hook, AAVG every k steps), it builds the
real model behind a `StandInModel` (`standin`), wraps it in the strategy the trainer would
(`distributed.strategy.build_strategy`: real DDP buckets and hooks, real AAVG averaging), and
times `warmup + steps` steps with the trainer's own step (`step.fixed_batch`, `step.run`):
forward and backward inside the strategy's micro-batch context, the gradient norm, the step's
one agreement all-reduce, the optimizer's update (waited), then the strategy's `after_step`. Rank 0 writes every rank's step
times and traffic to OUT.json.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from vidscale.bench.cluster.standin import Clock, ComputeProfile, stand_in_with_sgd
from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.collectives import all_gather_object, barrier
from vidscale.distributed.env import DistEnv, init_distributed, shutdown
from vidscale.distributed.parallel import DataParallel
from vidscale.distributed.strategy import build_strategy
from vidscale.distributed.sync.comm_handle import CommConfig, HookName
from vidscale.models.costs import model_costs
from vidscale.models.registry import ModelConfig, build_model
from vidscale.netlab.nodes import NODE_ENV
from vidscale.step.fixed_batch import FixedBatchStep


@dataclass(frozen=True)
class RankSpec:
    """What every rank runs (written by the launcher as JSON). `profiles`: per model, the
    `ComputeProfile` fields; `variants`: (strategy, hook, k) triples; `slow_node` (or -1)
    computes `slow_factor` times as long (a straggler's compute)."""

    models: tuple[str, ...]
    profiles: dict[str, dict[str, Any]]
    variants: tuple[tuple[str, str, int], ...]
    steps: int
    warmup: int
    batch: int
    frames: int
    size: int
    num_classes: int
    bucket_cap_mb: float
    powersgd_start_step: int = 2
    shared_core: bool = True
    slow_node: int = -1
    slow_factor: float = 1.0
    epoch_k: int = 0  # informational: AAVG's "an epoch" (`measured_steps`)

    @classmethod
    def read(cls, path: Path) -> RankSpec:
        raw = json.loads(path.read_text())
        raw["models"] = tuple(raw["models"])
        raw["variants"] = tuple(tuple(v) for v in raw["variants"])
        return cls(**raw)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def measured_steps(self, variant: tuple[str, str, int]) -> int:
        """`steps`; for AAVG, rounded up to whole averaging periods of its k (at least one):
        a step's mean then holds an averaging's share exactly as often as training does."""
        strategy, _, k = variant
        return -(-self.steps // k) * k if strategy == "aavg" else self.steps


def _profile(spec: RankSpec, model: str, rank: int) -> ComputeProfile:
    found = spec.profiles[model]
    profile = ComputeProfile(
        found["forward_s"],
        found["backward_s"],
        found["tail_s"],
        tuple(found["backward_shares"]),
    )
    return profile.scaled(spec.slow_factor) if rank == spec.slow_node else profile


def _stand_in_step(
    spec: RankSpec, model: str, real: nn.Module, variant: tuple[str, str, int], env: DistEnv
) -> tuple[FixedBatchStep, DataParallel, Clock, int]:
    """The trainer's step (`step.fixed_batch`) over the stand-in of `model` (its parameters
    `real`'s) wrapped in `variant`'s strategy; the strategy, the clock and the model's
    parameter count."""
    strategy_name, hook, k = variant
    costs = model_costs(model, frames=spec.frames, size=spec.size, num_classes=spec.num_classes)
    clock = Clock(shared_core=spec.shared_core)
    profile = _profile(spec, model, env.rank)
    standin, optimizer = stand_in_with_sgd(
        real, costs, profile, num_classes=spec.num_classes, clock=clock
    )
    comm = CommConfig(
        hook=cast(HookName, hook),
        bucket_cap_mb=spec.bucket_cap_mb,
        powersgd_start_step=spec.powersgd_start_step,
    )
    strategy = build_strategy(env, comm, name=strategy_name, aavg=AAVGConfig(k=max(1, k)))
    wrapped = strategy.wrap(standin, optimizer)
    step = FixedBatchStep(
        wrapped,
        torch.zeros(spec.batch, 1),  # the stand-in reads only the batch's size
        torch.zeros(spec.batch, dtype=torch.long),
        optimizer=optimizer,
        micro_batch=strategy.micro_batch,
        world_size=env.world_size,
    )
    return step, strategy, clock, costs.params


def real_model(spec: RankSpec, model: str) -> nn.Module:
    """`model` as every rank builds it (the same weights everywhere), once for all variants:
    sixteen ranks building I3D on two cores would otherwise take longer than measuring it."""
    cfg = ModelConfig(name=model, num_classes=spec.num_classes, frames=spec.frames, dropout=0.0)
    torch.manual_seed(0)
    return build_model(cfg)


def measure(
    spec: RankSpec, model: str, real: nn.Module, variant: tuple[str, str, int]
) -> dict[str, Any]:
    """This rank's steps of `model` (parameters `real`'s) under `variant`: step seconds,
    exposed communication, bytes, the waits' stretch by the other threads' CPU, and the CPU
    seconds the process used (what the machine's cores had to give this rank each step)."""
    env = init_distributed("cpu")
    step, strategy, clock, params = _stand_in_step(spec, model, real, variant, env)
    samples: dict[str, list[float]] = {
        "step_s": [],
        "comm_exposed_s": [],
        "comm_bytes": [],
        "stretched_s": [],
        "cpu_s": [],
    }
    strategy.take_traffic()
    for index in range(spec.warmup + spec.measured_steps(variant)):
        start, stretch, cpu = time.perf_counter(), clock.stretched_s, time.process_time()
        step()
        # The warm-up is an epoch of its own, as in `bench scaling`: AAVG averages at its end.
        in_epoch = index + 1 if index < spec.warmup else index - spec.warmup + 1
        strategy.after_step(step_in_epoch=in_epoch, epoch_end=index == spec.warmup - 1)
        traffic = strategy.take_traffic()
        if index >= spec.warmup:
            samples["step_s"].append(time.perf_counter() - start)
            samples["comm_exposed_s"].append(traffic.exposed_seconds)
            samples["comm_bytes"].append(traffic.bytes_sent)
            samples["stretched_s"].append(clock.stretched_s - stretch)
            samples["cpu_s"].append(time.process_time() - cpu)  # every thread's: gloo's too
    del step, strategy
    for param in real.parameters():
        param.grad = None  # DDP's bucket views go with the next variant's DDP
    gc.collect()
    return {**samples, "params": params}


def main(argv: list[str]) -> int:
    spec = RankSpec.read(Path(argv[0]))
    env = init_distributed("cpu")
    torch.set_num_threads(1)
    rows = []
    for model in spec.models:
        real = real_model(spec, model)
        for variant in spec.variants:
            found = measure(spec, model, real, variant)
            ranks = all_gather_object(found)
            barrier()
            strategy, hook, k = variant
            rows.append(
                {"model": model, "strategy": strategy, "hook": hook, "k": k, "ranks": ranks}
            )
            if env.is_main:
                step = sorted(ranks[0]["step_s"])[len(ranks[0]["step_s"]) // 2]
                print(f"cluster rank: {model} {strategy} {hook} k={k}: {step:.3f} s", flush=True)
    # The ring's order over the nodes (gloo's ring is the ranks'): which hops cross a trunk.
    nodes_by_rank = all_gather_object(int(os.environ.get(NODE_ENV, env.rank)))
    if env.is_main:
        out = {"world_size": env.world_size, "rows": rows, "nodes_by_rank": nodes_by_rank}
        Path(argv[1]).write_text(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    # Leave the process group before the interpreter ends, as the `vidscale` command does: a
    # gloo group still alive at exit can end a finished rank in SIGABRT ("terminate called
    # without an active exception"), which failed a pass now and then.
    try:
        status = main(sys.argv[1:])
    finally:
        shutdown()
    sys.exit(status)
