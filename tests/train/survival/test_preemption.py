"""Real signals to real training processes: SIGTERM checkpoints within one step and exits 75;
the same command again finishes the run with the losses of an uninterrupted one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.config import apply_overrides
from vidscale.distributed.env import init_distributed
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import load_checkpoint
from vidscale.run.metrics import read_metrics
from vidscale.run.record import read_record
from vidscale.train import loop
from vidscale.train.survival.resilience import PREEMPTED_EXIT_CODE

RECIPE = "demo_tsm_r18_8f_b32_e12"
STEPS = 12  # 3 epochs x 4 steps of 4 clips


def overrides(root: Path) -> list[str]:
    return [*tiny_overrides(root), "train.epochs=3", "optim.simulate_world_size=0"]


def train_command(root: Path, run: Path, *, nproc: int = 1) -> list[str]:
    launch = [sys.executable, "-m", "vidscale"]
    if nproc > 1:
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        launch += ["--nproc_per_node", str(nproc), "-m", "vidscale"]
    cmd = [*launch, "train", "--recipe", RECIPE, "--out", str(run)]
    for item in overrides(root):
        cmd += ["--set", item]
    if nproc > 1:  # 2 x 2 clips: the same global batch of 4
        cmd += ["--set", "data.batch_size=2"]
    return cmd


def run_to_end(cmd: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, env=environment(), timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def train_losses(run: Path) -> list[tuple[int, float]]:
    return [
        (r["step"], r["loss"]) for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"
    ]


def logged_steps(run: Path) -> int:
    return len(train_losses(run))


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def wait_for_step(proc: subprocess.Popen[str], run: Path, step: int, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while logged_steps(run) < step:
        assert proc.poll() is None, f"exited early with {proc.returncode}"
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.02)


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(c) for c in text]
    return found


def rank_of(pid: int) -> int | None:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for item in environ:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


@pytest.fixture(scope="module")
def uninterrupted(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    cfg = apply_overrides(get_recipe(RECIPE), overrides(tiny_demo))
    loop.Trainer(cfg, run, init_distributed("cpu")).run()
    return run


@pytest.mark.slow
def test_sigterm_checkpoints_within_one_step_and_the_rerun_matches(
    tiny_demo: Path, tmp_path: Path, uninterrupted: Path
) -> None:
    run = tmp_path / "run"
    cmd = train_command(tiny_demo, run)
    at = random.Random(os.getpid()).randrange(2, STEPS - 2)  # a different step each session
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=environment())
    wait_for_step(proc, run, at, timeout=120)
    proc.send_signal(signal.SIGTERM)
    sent_at = logged_steps(run)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == PREEMPTED_EXIT_CODE, err[-3000:]
    assert "SIGTERM received" in err and "Traceback" not in err
    saved = load_checkpoint(run / "checkpoints" / "last.pt")["progress"]["step"]
    assert sent_at <= saved <= sent_at + 1  # within one step of the signal
    assert logged_steps(run) == saved

    done = run_to_end(cmd, timeout=180)
    assert f"resuming {run}" in done.stdout
    assert train_losses(run) == train_losses(uninterrupted)
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["val_top1"] == json.loads((uninterrupted / "summary.json").read_text())["val_top1"]
    )


@pytest.mark.slow
def test_sigterm_to_one_torchrun_rank_stops_every_rank_at_the_same_step(
    tiny_demo: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    cmd = train_command(tiny_demo, run, nproc=2)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=environment())
    wait_for_step(proc, run, 3, timeout=180)
    workers = {rank_of(pid): pid for pid in children(proc.pid)}
    os.kill(workers[1], signal.SIGTERM)  # rank 1 only: rank 0 learns of it in the step's all-reduce
    _, err = proc.communicate(timeout=90)
    assert proc.returncode != 0  # torchrun reports its workers' exit code 75 as a failure
    assert f"exitcode  : {PREEMPTED_EXIT_CODE}" in err or "75" in err, err[-3000:]
    saved = load_checkpoint(run / "checkpoints" / "last.pt")
    origin = read_record(run / "checkpoints" / "last.pt").origin
    assert origin is not None and origin.sizes.world_size == 2
    assert logged_steps(run) == saved["progress"]["step"]

    run_to_end(cmd, timeout=240)
    assert [s for s, _ in train_losses(run)] == list(range(1, STEPS + 1))


@pytest.mark.slow
def test_torchrun_restart_after_a_killed_rank_completes_the_run_exactly(
    tiny_demo: Path, tmp_path: Path
) -> None:
    reference = tmp_path / "reference"
    cmd = train_command(tiny_demo, reference, nproc=2)
    run_to_end(cmd, timeout=240)

    run = tmp_path / "run"
    cmd = train_command(tiny_demo, run, nproc=2)
    cmd.insert(cmd.index("--standalone"), "--max-restarts=1")
    chance = random.Random(os.getpid())
    at, victim = chance.randrange(2, STEPS - 2), chance.randrange(2)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=environment())
    wait_for_step(proc, run, at, timeout=180)
    workers = {rank_of(pid): pid for pid in children(proc.pid)}
    os.kill(workers[victim], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"killed rank {victim} after step {at}:\n{err[-4000:]}"
    assert "Fatal Python error" not in err
    steps = [s for s, _ in train_losses(run)]
    assert steps == list(range(1, STEPS + 1))  # every step exactly once
    assert train_losses(run) == train_losses(reference)
    summaries = [json.loads((r / "summary.json").read_text()) for r in (run, reference)]
    assert summaries[0]["val_top1_history"] == summaries[1]["val_top1_history"]
