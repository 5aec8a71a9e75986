"""Measure fault-tolerant replica groups (docs/fault_tolerance.md) on this machine; print a table
and write JSON. Two measurements, each on the same run (a recipe, --data, batch 1 a process):

  failure: what a failure costs. TorchFT: two groups of one process, group 1 SIGKILLed at step
    --kill-at and started again at once; the survivor's stall, its throughput alone, the wall
    time until group 1 has rejoined, steps lost. torchrun: the same run as `vidscale train` on
    two processes under `torchrun --max-restarts 1`, checkpointing every --checkpoint-every
    steps, one rank SIGKILLed at the same step; torchrun restarts both, they resume from the
    checkpoint and replay: steps lost and wall time until the run is past the step again.
  failure --nodes N --rate R: the same across N nodes of a `vidscale.netlab` cluster (N network
    namespaces on one bridge, each link shaped to R both ways): the lighthouse on node 0, group
    g alone on node g (`train-ft --address`, N groups), group 1 SIGKILLed and restarted on its
    node; the torchrun restart as one agent per node (`--nnodes N`, c10d rendezvous at node 0's
    address, one process a node). Needs root.
  compare: AAVG across groups against TorchFT's LocalSGD (`train-ft --average-every K`, two
    groups, no failure): after the last averaging, the largest difference between the two
    replicas' parameters, BN statistics and momenta; training loss per epoch; validation top-1
    of each replica.

  python scripts/ft_measure.py failure --data DIR --out DIR --json failure.json
  python scripts/ft_measure.py failure --nodes 3 --rate 1gbit --data DIR --out DIR --json f.json
  python scripts/ft_measure.py compare --data DIR --out DIR --json compare.json
  python scripts/ft_measure.py compare --as-recipe --epochs 12 --data DEMO --out DIR --json c.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from vidscale.bench.cluster.measure import ending_on_sigterm
from vidscale.config import resolve
from vidscale.data.loaders import eval_dataset
from vidscale.distributed.ft.launch import (
    JOIN_TIMEOUT_MS,
    Lighthouse,
    children,
    finish,
    kill_group,
    records,
    start_group,
    wait_for,
)
from vidscale.errors import InputError
from vidscale.models.registry import build_model
from vidscale.netlab import nodes
from vidscale.netlab.cluster import Cluster
from vidscale.netlab.link import Rate
from vidscale.recipes import get_recipe
from vidscale.run.data import load_data

RECIPE = "demo_tsm_r18_8f_b32_e12"


def run_overrides(args: argparse.Namespace) -> list[str]:
    if args.as_recipe:  # the demo's own batch, frames and model: its accuracy means something
        return [f"data.root={args.data}", "train.progress=false", f"train.epochs={args.epochs}"]
    return [
        f"data.root={args.data}",
        f"model.name={args.model}",
        "data.batch_size=1",
        "data.workers=0",
        f"data.train_clip.frames={args.frames}",
        f"data.eval_clip.frames={args.frames}",
        "train.threads=1",
        "train.progress=false",
        "train.log_every=1",
        f"train.epochs={args.epochs}",
    ]


def as_flags(overrides: list[str]) -> list[str]:
    return ["--recipe", RECIPE, *(x for o in overrides for x in ("--set", o))]


def samples_per_s(rs: list[dict[str, Any]]) -> float:
    if len(rs) < 2:
        return float("nan")
    return sum(r["stop"] - r["start"] for r in rs[1:]) / (rs[-1]["time"] - rs[0]["time"])


def placement(cluster: Cluster | None, group: int) -> dict[str, Any]:
    """`launch.start_group`'s arguments that put `group` on its node (none on localhost)."""
    if cluster is None:
        return {}
    return {
        "prefix": cluster.exec_prefix(group),
        "address": cluster.addresses[group],
        "device": cluster.devices[group],
    }


@contextmanager
def lighthouse_for(
    out: Path, cluster: Cluster | None, join_timeout_ms: int = JOIN_TIMEOUT_MS
) -> Iterator[Lighthouse]:
    log = out / "lighthouse.log"
    if cluster is None:
        lighthouse = Lighthouse.start(log, join_timeout_ms=join_timeout_ms)
    else:
        host, prefix = cluster.addresses[0], cluster.exec_prefix(0)
        lighthouse = Lighthouse.start(
            log, join_timeout_ms=join_timeout_ms, host=host, prefix=prefix
        )
    try:
        yield lighthouse
    finally:
        lighthouse.kill()


def torchft_failure(args: argparse.Namespace, out: Path, cluster: Cluster | None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    n, run = args.groups, as_flags(run_overrides(args))
    started: list[subprocess.Popen] = []
    load = os.getloadavg()[0]
    with lighthouse_for(out, cluster, args.join_timeout_ms) as lighthouse:
        go = dict(run=run, out=out, lighthouse=lighthouse.address, timeout_s=args.timeout)

        def start(g: int) -> subprocess.Popen:
            started.append(start_group(g, n, **go, **placement(cluster, g)))  # type: ignore[arg-type]
            return started[-1]

        try:
            groups = [start(g) for g in range(n)]
            wait_for(lambda: len(records(out, 1)) >= args.kill_at, 600, "the kill step")
            kill_group(groups[1])
            killed = time.time()
            killed_at = records(out, 1)[-1]["step"]
            groups[1] = start(1)
            for g, process in enumerate(groups):
                finish(process, 1800, out, g)
        finally:
            for process in started:
                if process.poll() is None:
                    kill_group(process)
    s0, s1 = records(out, 0), records(out, 1)
    healthy = [r for r in s0 if r["participants"] == n and r["time"] < killed]
    rejoined = next(r for r in s1 if r["time"] > killed)
    alone = [r for r in s0 if killed < r["time"] < rejoined["time"]]
    after = [r for r in s0 if r["time"] >= rejoined["time"]]
    return {
        "groups": n,
        "killed_at_step": killed_at,
        "survivor_stall_s": next(r["time"] for r in s0 if r["time"] > killed) - killed,
        "rejoin_wall_s": rejoined["time"] - killed,
        "rejoined_at_step": rejoined["step"],
        "rejoined_healed": rejoined["healed"],
        "committed_steps_lost": steps_lost(out, n),
        "healthy_clips_per_s": samples_per_s(healthy),
        "degraded_clips_per_s": samples_per_s(alone),
        "degraded_steps": len(alone),
        "after_rejoin_clips_per_s": samples_per_s(after),
        # Steps after the rejoin that every group took, and heals in them: a group late for a
        # quorum is left out of it and heals at the next (TorchFT's join timeout).
        "after_rejoin_steps": len(after),
        "after_rejoin_steps_all_groups": sum(r["participants"] == n for r in after),
        "after_rejoin_heals": sum(
            r["healed"] for g in range(n) for r in records(out, g) if r["time"] > rejoined["time"]
        ),
        **whole_run(out, n),
        **quorum_waits(out / "lighthouse.log"),
        "load_average_1min": [load, os.getloadavg()[0]],
    }


def whole_run(out: Path, groups: int) -> dict[str, Any]:
    """Over the whole run, each group's log read once: committed steps, those every group took,
    heals, and clips a second from the first commit to the last (each committed step's global
    batch counted once)."""
    logs = [records(out, g) for g in range(groups)]
    takers: dict[int, set[int]] = {}
    batch: dict[int, int] = {}
    for g, log in enumerate(logs):
        for r in log:
            takers.setdefault(r["step"], set()).add(g)
            batch[r["step"]] = r["stop"] - r["start"]
    times = [r["time"] for log in logs for r in log]
    return {
        "committed_steps": len(takers),
        "steps_all_groups": sum(len(t) == groups for t in takers.values()),
        "heals": sum(r["healed"] for log in logs for r in log),
        "clips_per_s_over_run": sum(batch.values()) / (max(times) - min(times)),
    }


# The lighthouse's log lines (torchft 0.2.0): a request, a quorum formed, and the status that
# says it formed with fewer groups asking than heartbeating (a live group left out).
_LOG_TIME = re.compile(r"^(\S+) \[INFO\]")
_LEFT_OUT = re.compile(
    r"Valid quorum found \[(\d+)/\d+ participants healthy\]\[(\d+) heartbeating\]"
)


def quorum_waits(log: Path) -> dict[str, Any]:
    """From the lighthouse's log: each quorum's wait (from its first group's request to its
    forming; the others wait that long for the last), and the quorums formed without a group
    that was alive (heartbeating) but late: the join timeout's cost and what it prevents."""
    waits: list[float] = []
    first: datetime | None = None
    left_out = 0
    for line in log.read_text(errors="replace").splitlines():
        stamp = _LOG_TIME.match(line)
        if stamp is None:
            continue
        when = datetime.fromisoformat(stamp.group(1))
        if "Received quorum request" in line and first is None:
            first = when
        elif "Quorum! " in line and first is not None:
            waits.append((when - first).total_seconds())
            first = None
        elif (found := _LEFT_OUT.search(line)) and int(found.group(1)) < int(found.group(2)):
            left_out += 1
    return {
        "quorums": len(waits),
        "quorum_wait_median_s": statistics.median(waits) if waits else float("nan"),
        "quorum_wait_max_s": max(waits, default=float("nan")),
        "quorums_leaving_out_a_live_group": left_out,
    }


def steps_lost(out: Path, groups: int) -> int:
    """Committed steps taken again: a step number a group logs twice (the killed group's log
    goes on after its restart). Asserts that the steps committed by any group run 1, 2, ...
    with none missing."""
    logs = [[r["step"] for r in records(out, g)] for g in range(groups)]
    committed = sorted({step for log in logs for step in log})
    assert committed == list(range(1, len(committed) + 1)), "a committed step is missing"
    return max(len(log) - len(set(log)) for log in logs)


def train_steps(metrics: Path) -> list[dict[str, Any]]:
    if not metrics.exists():
        return []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "train"]


def torchrun_job(
    args: argparse.Namespace, out: Path, cluster: Cluster | None
) -> tuple[list[subprocess.Popen], Any]:
    """`vidscale train` under torchrun (`--max-restarts 1`), one process a group: on localhost
    one agent, on a cluster one agent a node (`netlab.nodes`); the agents and a `wait()`."""
    overrides = [*run_overrides(args), f"train.checkpoint_every_steps={args.checkpoint_every}"]
    # One clip a process a step, as each group takes (the recipe simulates 2 processes).
    overrides.append(f"optim.simulate_world_size={args.groups}")
    train = ["train", *as_flags(overrides), "--out", str(out)]
    out.mkdir(parents=True, exist_ok=True)
    if cluster is not None:
        job = nodes.start(cluster, train, log_dir=out.parent, cores=None, max_restarts=1)
        return job.procs, lambda: job.wait(1800, kill_on_bad_exit=False)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    cmd += [str(args.groups), "--max-restarts", "1", "-m", "vidscale", *train]
    with (out.parent / "torchrun.log").open("w") as log:
        agent = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return [agent], lambda: [agent.wait(timeout=1800)]


def torchrun_failure(
    args: argparse.Namespace, out: Path, cluster: Cluster | None
) -> dict[str, Any]:
    load = os.getloadavg()[0]
    agents, wait = torchrun_job(args, out, cluster)
    try:
        metrics = out / "metrics.jsonl"
        wait_for(lambda: len(train_steps(metrics)) >= args.kill_at, 600, "the kill step")
        os.kill(children(agents[-1].pid)[-1], signal.SIGKILL)  # the last node's (last) worker
        killed = time.time()
        killed_at = train_steps(metrics)[-1]["step"]
        codes = wait()
    finally:
        for agent in agents:
            if agent.poll() is None:
                kill_group(agent)
    rows = train_steps(metrics)
    before = [r for r in rows if r["time"] < killed]
    replay = [r for r in rows if r["time"] > killed]
    past = next(r for r in replay if r["step"] > killed_at)
    clips = args.groups

    def rate(rs: list[dict[str, Any]]) -> float:
        return clips * (len(rs) - 1) / (rs[-1]["time"] - rs[0]["time"]) if len(rs) > 1 else 0.0

    return {
        "killed_at_step": killed_at,
        "exit_status": codes,
        "resumed_from_step": replay[0]["step"] - 1,
        "steps_lost": killed_at - (replay[0]["step"] - 1),
        "first_step_after_restart_s": replay[0]["time"] - killed,
        "past_kill_step_s": past["time"] - killed,
        "healthy_clips_per_s": rate(before),
        "degraded_clips_per_s": 0.0,  # no step runs until every rank is back
        "load_average_1min": [load, os.getloadavg()[0]],
    }


def val_top1(overrides: list[str], state: dict[str, Any]) -> float:
    cfg, splits = load_data(resolve(get_recipe(RECIPE), overrides))
    model = build_model(cfg.model)
    model.load_state_dict(state["model"])
    model.eval()
    data = eval_dataset(cfg.data, splits.val, seed=cfg.train.seed)
    from vidscale.data.inputs import ModelInput

    take = ModelInput.of(cfg.data.eval_clip, cfg.data)
    hits = 0
    with torch.no_grad():
        for i in range(len(data)):
            item = data[i]
            logits = model(
                take({k: v[None] for k, v in item["inputs"].items()}, torch.device("cpu"))
            )
            hits += int(logits.argmax(1).item() == item["label"])
    return 100.0 * hits / len(data)


def differences(states: list[dict[str, Any]]) -> dict[str, float]:
    a, b = states
    kinds: dict[str, float] = {"params": 0.0, "bn": 0.0, "moments": 0.0}
    for k, v in a["model"].items():
        if v.is_floating_point():
            kind = "bn" if "running" in k else "params"
            kinds[kind] = max(kinds[kind], float((v - b["model"][k]).abs().max()))
    for k, s in a["optimizer"]["state"].items():
        for name, v in s.items():
            if torch.is_tensor(v) and v.is_floating_point() and v.dim() > 0:
                other = b["optimizer"]["state"][k][name]
                kinds["moments"] = max(kinds["moments"], float((v - other).abs().max()))
    return kinds


def compare(args: argparse.Namespace) -> dict[str, Any]:
    found = {}
    for averager in ("aavg", "localsgd"):
        out = args.out / averager
        out.mkdir(parents=True, exist_ok=True)
        lighthouse = Lighthouse.start(out / "lighthouse.log")
        extra = ["--average-every", str(args.k), "--averager", averager]
        go = dict(run=as_flags(run_overrides(args)), out=out, lighthouse=lighthouse.address)
        try:
            groups = [start_group(g, 2, extra=extra, **go) for g in range(2)]  # type: ignore[arg-type]
            for g, p in enumerate(groups):
                finish(p, 1800, out, g)
        finally:
            lighthouse.kill()
        states = [
            torch.load(out / "ft" / f"final-group{g}.rank0.pt", weights_only=True) for g in range(2)
        ]
        logs = [records(out, g) for g in range(2)]
        loss = {
            e: sum(r["loss"] for log in logs for r in log if r["epoch"] == e)
            / sum(1 for log in logs for r in log if r["epoch"] == e)
            for e in range(args.epochs)
        }
        found[averager] = {
            "max_difference_after_last_averaging": differences(states),
            "train_loss_per_epoch": loss,
            "val_top1_per_replica": [val_top1(run_overrides(args), s) for s in states],
        }
    return found


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("what", choices=["failure", "compare"])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--model", default="tsn_resnet18")
    p.add_argument("--frames", type=int, default=4)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--kill-at", type=int, default=8)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--k", type=int, default=4)
    p.add_argument(
        "--as-recipe",
        action="store_true",
        help="compare: the recipe's own batch, frames and model (not --model/--frames, batch 1)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=0,
        help="failure: N netlab nodes, one group each (0: localhost)",
    )
    p.add_argument("--rate", default="1gbit", help="with --nodes: each node's link, each way")
    p.add_argument(
        "--join-timeout-ms",
        type=int,
        default=JOIN_TIMEOUT_MS,
        help="failure: the lighthouse's wait for a live group late to join a quorum",
    )
    p.add_argument("--torchft-only", action="store_true", help="failure: skip the torchrun restart")
    args = p.parse_args()
    args.groups = args.nodes or 2
    if args.what == "failure" and args.nodes:
        if args.nodes < 2:
            p.error(f"--nodes {args.nodes}: a failure needs at least 2 groups")
        try:
            rate = Rate.parse(args.rate)
        except InputError as err:
            p.error(f"--rate: {err}")
        with ending_on_sigterm(), Cluster(args.nodes, rate=rate) as cluster:
            result = {
                "nodes": args.nodes,
                "rate": args.rate,
                "join_timeout_ms": args.join_timeout_ms,
                "torchft": torchft_failure(args, args.out / "torchft", cluster),
            }
            if not args.torchft_only:
                result["torchrun"] = torchrun_failure(args, args.out / "torchrun" / "run", cluster)
    elif args.what == "failure":
        result = {
            "join_timeout_ms": args.join_timeout_ms,
            "torchft": torchft_failure(args, args.out / "torchft", None),
        }
        if not args.torchft_only:
            result["torchrun"] = torchrun_failure(args, args.out / "torchrun" / "run", None)
    else:
        result = compare(args)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    for line in table(result):
        print(line)
    return 0


def table(result: dict[str, Any], prefix: str = "") -> list[str]:
    """One `name  value` row per number, names dotted by section."""
    rows = []
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += table(value, f"{name}.")
        else:
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            rows.append(f"{name:60s} {shown}")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
