"""On a GPU: a 1-process torchrun training run on NCCL, SIGTERMed mid-run, resumes exactly:
the same per-step losses and validation accuracy as an uninterrupted run. The CPU version
(and the helpers) are in test_preemption.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.survival.test_preemption import (
    RECIPE,
    STEPS,
    children,
    environment,
    logged_steps,
    overrides,
    rank_of,
    run_to_end,
    train_losses,
    wait_for_step,
)
from vidscale.run.checkpoint import load_checkpoint
from vidscale.train.survival.resilience import PREEMPTED_EXIT_CODE

MAIN = Path(__file__).with_name("deterministic_main.py")
# The fast path's probe and cudnn autotuning would let two runs pick different kernels.
CUDA = ["train.device=cuda", "dist.backend=nccl", "train.fast_path=false"]


def torchrun_command(root: Path, run: Path) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
    cmd += [str(MAIN), "train", "--recipe", RECIPE, "--out", str(run)]
    for item in [*overrides(root), *CUDA]:
        cmd += ["--set", item]
    return cmd


@pytest.mark.cuda
@pytest.mark.slow
def test_nccl_run_sigtermed_mid_run_resumes_exactly(tiny_demo: Path, tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    run_to_end(torchrun_command(tiny_demo, reference), timeout=240)

    run = tmp_path / "run"
    cmd = torchrun_command(tiny_demo, run)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=environment())
    wait_for_step(proc, run, STEPS // 2, timeout=180)
    workers = {rank_of(pid): pid for pid in children(proc.pid)}  # other children: no RANK
    os.kill(workers[0], signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode != 0, "the run finished before the signal reached it"
    assert f"exitcode  : {PREEMPTED_EXIT_CODE}" in err or str(PREEMPTED_EXIT_CODE) in err, err[
        -3000:
    ]
    saved = load_checkpoint(run / "checkpoints" / "last.pt")["progress"]["step"]
    assert STEPS // 2 <= saved < STEPS and logged_steps(run) == saved

    done = run_to_end(cmd, timeout=240)
    assert f"resuming {run}" in done.stdout
    assert [s for s, _ in train_losses(run)] == list(range(1, STEPS + 1))
    assert train_losses(run) == train_losses(reference)
    summaries = [json.loads((r / "summary.json").read_text()) for r in (run, reference)]
    assert summaries[0]["val_top1_history"] == summaries[1]["val_top1_history"]
