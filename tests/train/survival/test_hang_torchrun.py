"""Real hangs under `torchrun --max-restarts 1` on 2 CPU processes: a rank or a loader worker
is SIGSTOPped mid-run; a watchdog notices within its bound, writes the stacks and ends its
rank; torchrun restarts the group, which resumes from the last checkpoint and ends with the
per-step losses and epoch metrics of an uninterrupted run, long before `dist.timeout_s`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.run.metrics import read_metrics
from vidscale.train.survival.watchdog import HANG_EXIT_CODE

RECIPE = "demo_tsm_r18_8f_b32_e12"
DIST_TIMEOUT_S = 600  # the collective timeout the watchdog must beat by far


def train_command(root: Path, run: Path) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--max-restarts=1"]
    cmd += ["--nproc_per_node", "2", "-m", "vidscale", "train", "--recipe", RECIPE]
    cmd += ["--out", str(run)]
    sets = [
        *tiny_overrides(root),
        "data.batch_size=2",
        "data.workers=1",  # a real loader worker to stall
        "train.epochs=2",
        "optim.simulate_world_size=0",
        "train.amp=off",  # compare runs, not a load-dependent fast-path choice
        "train.channels_last=off",
        "train.checkpoint_every_steps=1",  # the resume point is the step before the stall
        "train.hang_floor_s=5",
        "train.hang_factor=3",
        f"dist.timeout_s={DIST_TIMEOUT_S}",
    ]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def history(run: Path) -> tuple[list[tuple[int, float]], list[dict[str, Any]]]:
    """Every step's loss, and each epoch's metrics without its times."""
    recs = read_metrics(run / "metrics.jsonl")
    steps = [(r["step"], r["loss"]) for r in recs if r["kind"] == "train"]
    keys = ("epoch", "train_loss", "train_top1", "val_top1", "val_top5", "val_loss", "lr")
    epochs = [{k: r[k] for k in keys} for r in recs if r["kind"] == "epoch"]
    return steps, epochs


def logged_steps(run: Path) -> int:
    path = run / "metrics.jsonl"
    return sum(r["kind"] == "train" for r in read_metrics(path)) if path.exists() else 0


def wait_for_step(proc: subprocess.Popen[str], run: Path, step: int) -> None:
    deadline = time.monotonic() + 180
    while logged_steps(run) < step:
        assert proc.poll() is None, f"exited early with {proc.returncode}"
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.02)


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def rank_pids(torchrun: int) -> dict[int, int]:
    """The training processes torchrun started, by their RANK."""
    ranks = {}
    for pid in children(torchrun):
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"RANK="):
                ranks[int(item[5:])] = pid
    return ranks


def hang_records(run: Path) -> list[dict[str, Any]]:
    path = run / "hangs" / "hangs.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Processes a test stopped: killed at the end should the run have left any behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def uninterrupted(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    cmd = train_command(tiny_demo, run)
    done = subprocess.run(cmd, capture_output=True, text=True, env=environment(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (run / "hangs").exists()  # no false alarm on a run that does not stall
    return run


def run_with_a_stall(
    tiny_demo: Path, run: Path, stopped: list[int], *, pick: str
) -> tuple[str, float]:
    """Start the run, SIGSTOP a process (`pick`: "rank 1" or "worker of rank 1") after step 3,
    wait for the run to end; returns torchrun's stderr and the seconds from stop to end."""
    proc = subprocess.Popen(
        train_command(tiny_demo, run), stderr=subprocess.PIPE, text=True, env=environment()
    )
    try:
        wait_for_step(proc, run, 3)  # of 4 in the first epoch: before any evaluation
        rank1 = rank_pids(proc.pid)[1]
        workers = children(rank1)  # its train loader's one worker (evaluation has none yet)
        victim = rank1 if pick == "rank 1" else workers[0]
        os.kill(victim, signal.SIGSTOP)
        stopped.append(victim)
        at = time.monotonic()
        _, err = proc.communicate(timeout=240)
        return err, time.monotonic() - at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
def test_a_stopped_rank_is_detected_by_its_peer_and_the_run_resumes_exactly(
    tiny_demo: Path, tmp_path: Path, uninterrupted: Path, stopped: list[int]
) -> None:
    run = tmp_path / "run"
    err, took = run_with_a_stall(tiny_demo, run, stopped, pick="rank 1")
    assert f"exitcode: {HANG_EXIT_CODE}" in err, err[-3000:]  # torchrun's account of rank 0
    # rank 1 cannot run its own watchdog; rank 0, blocked in a collective on it, can: in the
    # step's all-reduce, or in the barrier of the checkpoint that follows each step
    (record,) = hang_records(run)
    assert record["rank"] == 0 and record["kind"] in ("step", "checkpoint"), record
    assert record["waited_s"] < 30
    assert f"vidscale: rank 0 hung in {record['phase']}: no progress for " in err, err[-3000:]
    stacks = (run / "hangs" / record["stacks"]).read_text()
    assert f"hung in {record['phase']}" in stacks
    assert "vidscale/distributed/collectives.py" in stacks  # rank 0 waits in a collective
    assert history(run) == history(uninterrupted)
    assert took < DIST_TIMEOUT_S / 4, f"{took:.0f} s from the stall to the end of the run"


@pytest.mark.slow
def test_a_stopped_loader_worker_is_detected_by_its_rank_and_the_run_resumes_exactly(
    tiny_demo: Path, tmp_path: Path, uninterrupted: Path, stopped: list[int]
) -> None:
    run = tmp_path / "run"
    err, took = run_with_a_stall(tiny_demo, run, stopped, pick="worker of rank 1")
    mine = [r for r in hang_records(run) if r["rank"] == 1]
    assert mine, f"{hang_records(run)}\n{err[-3000:]}"
    (record,) = mine
    assert record["kind"] == "step" and record["waited_s"] < 30
    assert f"vidscale: rank 1 hung in {record['phase']}: no progress for " in err
    stacks = (run / "hangs" / record["stacks"]).read_text()
    assert f"loader worker pid {stopped[0]}: state T (stopped)" in stacks
    assert "_get_data" in stacks or "_next_data" in stacks  # rank 1 waits on its loader
    assert not Path(f"/proc/{stopped[0]}").exists()  # the stopped worker went with its rank
    assert history(run) == history(uninterrupted)
    assert took < DIST_TIMEOUT_S / 4, f"{took:.0f} s from the stall to the end of the run"
