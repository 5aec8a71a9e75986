"""Several nodes on one machine: `scripts/multinode_local.sh` starts two torchrun agents, one
process each, joined by a c10d rendezvous. Real agents, real gloo: the run must equal the
single-agent `torchrun --standalone --nproc_per_node 2` run step for step, and the script must
stop the surviving agent when the other one dies."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from vidscale.data.synthetic.videos import write_synthetic_dataset
from vidscale.run.checkpoint import load_checkpoint
from vidscale.run.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "multinode_local.sh"
RECIPE = "demo_tsm_r18_8f_b32_e12"
# 16 training videos, 4 per rank: 2 steps of global batch 8 per epoch.
TINY = [
    "data.batch_size=4",
    "data.workers=0",
    "data.train_clip.frames=4",
    "data.eval_clip.frames=4",
    "train.epochs=2",
    "train.threads=1",
    "train.fast_path=false",  # compare the launches, not a device-speed-dependent choice
    "train.progress=false",
    "train.log_every=1",
]
# Record fields that measure time, not training.
TIMINGS = {"time", "comm_seconds", "clips_per_second", "epoch_seconds", "data_wait_fraction"}
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (ROOT / ".venv" / "bin" / "python").exists(),
        reason="the script runs in the repository's .venv (scripts/setup.sh)",
    ),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("multinode_data")
    write_synthetic_dataset(root, seed=1, train_per_class=2, val_per_class=1, size=32, num_frames=8)
    return root


def sets(*overrides: str) -> list[str]:
    return [arg for s in overrides for arg in ("--set", s)]


def script(data: Path, runs: Path, *overrides: str) -> subprocess.Popen[str]:
    env = {**ENV, "RECIPE": RECIPE, "DEMO_DATA": str(data), "RUNS": str(runs), "RUN": "two"}
    return subprocess.Popen(
        ["bash", str(SCRIPT), *sets(*overrides)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a hung launch is stopped as a whole (`stop`)
    )


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def standalone(data: Path, out: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "vidscale", "train", "--recipe", RECIPE, "--data", str(data), "--out", str(out)]
    proc = subprocess.run(cmd + sets(*TINY), capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-4000:]


def agents(run: Path) -> dict[int, dict[str, Any]]:
    """Each agent's rendezvous result, by the agent's rank in the group (torchrun's INFO log)."""
    found = {}
    for log in sorted(run.glob("agent*.log")):
        text = log.read_text()
        line = re.search(r"^\S+ \S+ (\d+) .*\bgroup_rank=(\d+)$", text, re.MULTILINE)
        assert line, f"{log.name} has no rendezvous result:\n{text[-2000:]}"
        found[int(line[2])] = {
            "pid": int(line[1]),
            "group_world_size": int(re.findall(r"group_world_size=(\d+)", text)[0]),
            "global_ranks": re.findall(r"global_ranks=(\[.*\])", text)[0],
            "global_world_sizes": re.findall(r"global_world_sizes=(\[.*\])", text)[0],
            "rank0_output": "vidscale: 2 process(es)" in text,
        }
    return found


def training_records(run: Path) -> list[dict[str, Any]]:
    records = read_metrics(run / "metrics.jsonl")
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    model: dict[str, torch.Tensor] = load_checkpoint(run / "checkpoints" / "last.pt")["model"]
    return model


def test_two_c10d_agents_train_as_one_standalone_agent(data: Path, tmp_path: Path) -> None:
    proc = script(data, tmp_path, *TINY)
    try:
        output, _ = proc.communicate(timeout=300)
    finally:
        stop(proc)
    assert proc.returncode == 0, output[-4000:]
    two, one = tmp_path / "two", tmp_path / "one"
    standalone(data, one)

    # Two agents, each its own process with one rank, made one group of two by the rendezvous.
    found = agents(two)
    assert sorted(found) == [0, 1]
    assert found[0]["pid"] != found[1]["pid"]
    for group_rank, agent in found.items():
        assert agent["group_world_size"] == 2
        assert agent["global_ranks"] == f"[{group_rank}]"
        assert agent["global_world_sizes"] == "[2]"
        assert agent["rank0_output"] == (group_rank == 0)

    summaries = [json.loads((run / "summary.json").read_text()) for run in (two, one)]
    assert summaries[0]["world_size"] == summaries[1]["world_size"] == 2
    for key in ("global_batch", "train_steps", "val_top1_history", "val_videos", "comm_bytes"):
        assert summaries[0][key] == summaries[1][key], key
    records = training_records(two)
    assert [r["kind"] for r in records] == ["train", "train", "epoch"] * 2
    assert records == training_records(one)
    weights, reference = final_weights(two), final_weights(one)
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[k], reference[k]) for k in weights)


def test_an_agent_that_dies_stops_the_other(data: Path, tmp_path: Path) -> None:
    # Long enough that the survivor would still be training when the test gives up on it. The
    # agent of group rank 1 dies: its rank lives on without it (the ranks' store is in the
    # other agent), so nothing but the script stops the run.
    proc = script(data, tmp_path, *TINY, "train.epochs=1000")
    try:
        run = tmp_path / "two"
        deadline = time.monotonic() + 120
        while not _training(run):
            assert proc.poll() is None, "the launch ended before training"
            assert time.monotonic() < deadline, "no epoch within 120 s"
            time.sleep(0.2)
        pids = {rank: agent["pid"] for rank, agent in agents(run).items()}
        os.kill(pids[1], signal.SIGKILL)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode != 0
        assert "an agent ended with exit status" in output
        assert not Path(f"/proc/{pids[0]}").exists(), "the surviving agent is still running"
    finally:
        stop(proc)


def _training(run: Path) -> bool:
    """Both agents met and rank 0 finished its first epoch."""
    logs = [log.read_text() for log in run.glob("agent*.log")]
    return sum("group_rank=" in log for log in logs) == 2 and any("epoch 1/" in t for t in logs)
