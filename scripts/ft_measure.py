"""Measure fault-tolerant replica groups (docs/fault_tolerance.md) on this machine; print a table
and write JSON. Two measurements, each on the same run (a recipe, --data, batch 1 a process):

  failure: what a failure costs. TorchFT: two groups of one process, group 1 SIGKILLed at step
    --kill-at and started again at once; the survivor's stall, its throughput alone, the wall
    time until group 1 has rejoined, steps lost. torchrun: the same run as `vidscale train` on
    two processes under `torchrun --max-restarts 1`, checkpointing every --checkpoint-every
    steps, one rank SIGKILLed at the same step; torchrun restarts both, they resume from the
    checkpoint and replay: steps lost and wall time until the run is past the step again.
  compare: AAVG across groups against TorchFT's LocalSGD (`train-ft --average-every K`, two
    groups, no failure): after the last averaging, the largest difference between the two
    replicas' parameters, BN statistics and momenta; training loss per epoch; validation top-1
    of each replica.

  python scripts/ft_measure.py failure --data DIR --out DIR --json failure.json
  python scripts/ft_measure.py compare --data DIR --out DIR --json compare.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from vidscale.config import resolve
from vidscale.data.loaders import eval_dataset
from vidscale.distributed.ft.launch import (
    Lighthouse,
    children,
    finish,
    kill_group,
    records,
    start_group,
    wait_for,
)
from vidscale.models.registry import build_model
from vidscale.recipes import get_recipe
from vidscale.run.data import load_data

RECIPE = "demo_tsm_r18_8f_b32_e10"


def run_overrides(args: argparse.Namespace) -> list[str]:
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


def torchft_failure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    lighthouse = Lighthouse.start(out / "lighthouse.log")
    run = as_flags(run_overrides(args))
    go = dict(run=run, out=out, lighthouse=lighthouse.address, timeout_s=args.timeout)
    try:
        survivor, victim = start_group(0, 2, **go), start_group(1, 2, **go)  # type: ignore[arg-type]
        wait_for(lambda: len(records(out, 1)) >= args.kill_at, 600, "the kill step")
        kill_group(victim)
        killed = time.time()
        killed_at = records(out, 1)[-1]["step"]
        back = start_group(1, 2, **go)  # type: ignore[arg-type]
        finish(survivor, 1800, out, 0), finish(back, 600, out, 1)
    finally:
        lighthouse.kill()
    s0, s1 = records(out, 0), records(out, 1)
    healthy = [r for r in s0 if r["participants"] == 2 and r["time"] < killed]
    alone = [r for r in s0 if r["participants"] == 1 and r["time"] > killed]
    rejoined = next(r for r in s1 if r["time"] > killed)
    after = [r for r in s0 if r["time"] > rejoined["time"]]
    return {
        "killed_at_step": killed_at,
        "survivor_stall_s": next(r["time"] for r in s0 if r["time"] > killed) - killed,
        "rejoin_wall_s": rejoined["time"] - killed,
        "rejoined_at_step": rejoined["step"],
        "rejoined_healed": rejoined["healed"],
        "committed_steps_lost": 0 if [r["step"] for r in s0] == list(range(1, len(s0) + 1)) else -1,
        "healthy_clips_per_s": samples_per_s(healthy),
        "degraded_clips_per_s": samples_per_s(alone),
        "degraded_steps": len(alone),
        "after_rejoin_clips_per_s": samples_per_s(after),
    }


def train_steps(metrics: Path) -> list[dict[str, Any]]:
    if not metrics.exists():
        return []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "train"]


def torchrun_failure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    overrides = [*run_overrides(args), f"train.checkpoint_every_steps={args.checkpoint_every}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["--max-restarts", "1", "-m", "vidscale", "train", *as_flags(overrides)]
    cmd += ["--out", str(out)]
    out.mkdir(parents=True, exist_ok=True)
    with (out.parent / "torchrun.log").open("w") as log:
        agent = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    metrics = out / "metrics.jsonl"
    wait_for(lambda: len(train_steps(metrics)) >= args.kill_at, 600, "the kill step")
    os.kill(children(agent.pid)[-1], signal.SIGKILL)
    killed = time.time()
    killed_at = train_steps(metrics)[-1]["step"]
    agent.wait(timeout=1800)
    rows = train_steps(metrics)
    before = [r for r in rows if r["time"] < killed]
    replay = [r for r in rows if r["time"] > killed]
    past = next(r for r in replay if r["step"] > killed_at)
    clips = args.batch_global

    def rate(rs: list[dict[str, Any]]) -> float:
        return clips * (len(rs) - 1) / (rs[-1]["time"] - rs[0]["time"]) if len(rs) > 1 else 0.0

    return {
        "killed_at_step": killed_at,
        "exit_status": agent.returncode,
        "resumed_from_step": replay[0]["step"] - 1,
        "steps_lost": killed_at - (replay[0]["step"] - 1),
        "first_step_after_restart_s": replay[0]["time"] - killed,
        "past_kill_step_s": past["time"] - killed,
        "healthy_clips_per_s": rate(before),
        "degraded_clips_per_s": 0.0,  # no step runs until every rank is back
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
    args = p.parse_args()
    args.batch_global = 2
    if args.what == "failure":
        result = {
            "torchft": torchft_failure(args, args.out / "torchft"),
            "torchrun": torchrun_failure(args, args.out / "torchrun" / "run"),
        }
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
