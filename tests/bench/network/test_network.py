"""`vidscale bench network`: a real two-node run across a shaped link, in miniature (as root), and
its one-line refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vidscale.bench.network.config import NetworkConfig
from vidscale.errors import ConfigError
from vidscale.netlab.link import PREFIX, namespaces

TINY = ["--models", "tsm_resnet18", "--frames", "2", "--size", "32", "--batch", "1"]


def test_bad_rates_and_an_epoch_k_off_the_grid_are_refused() -> None:
    with pytest.raises(ConfigError, match="--rates"):
        NetworkConfig(rates=("fast",)).check()
    with pytest.raises(ConfigError, match="--epoch-k"):
        NetworkConfig(aavg_k=4, epoch_k=6).check()
    passes = NetworkConfig(aavg_k=4, epoch_k=16).passes()
    assert [p.strategies for p in passes] == [("ddp", "aavg"), ("aavg",)]
    assert passes[1].aavg_k == passes[1].steps == 16
    # Lockstep: as many steps as the longer pass, averaging once, at the last.
    lockstep = NetworkConfig(aavg_k=4, epoch_k=16).lockstep_pass()
    assert lockstep.strategies == ("aavg",) and lockstep.aavg_k == lockstep.steps == 16
    assert NetworkConfig(steps=6, aavg_k=2, epoch_k=0).lockstep_pass().aavg_k == 6


def run_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vidscale", "bench", "network", *TINY, *args]
    cmd += ["--out-json", str(tmp_path / "net.json"), "--plot", str(tmp_path / "net.png")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)


@pytest.mark.slow
def test_two_nodes_across_a_shaped_link_are_measured_and_predicted(
    netns_ok: None, tmp_path: Path
) -> None:
    done = run_bench(tmp_path, "--rates", "500mbit", "--hooks", "none,powersgd", "--epoch-k", "8")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "net.json").read_text())
    rows = result["rows"]
    assert {r["variant"] for r in rows} == {"ddp", "ddp+powersgd", "aavg k=4", "aavg k=8"}
    (link,) = result["links"]
    assert link["shaped_bits_per_s"] == 500e6
    assert 0.5 * 500e6 < link["allreduce_bytes_per_s"] * 8 < 1.05 * 500e6  # the shaper's cap
    by_variant = {r["variant"]: r for r in rows}
    # The link is the bottleneck: plain DDP moves every gradient, PowerSGD and AAVG far fewer.
    assert (
        by_variant["ddp"]["comm_bytes_per_step"]
        > 20 * by_variant["ddp+powersgd"]["comm_bytes_per_step"]
    )
    assert (
        by_variant["aavg k=8"]["comm_bytes_per_step"]
        < by_variant["aavg k=4"]["comm_bytes_per_step"]
    )
    for row in rows:
        assert row["predicted_step_s"] > 0 and row["error"] == pytest.approx(
            row["predicted_step_s"] / row["step_s"] - 1
        )
        # The CPU time a step: the training thread's within the process's (gloo's threads
        # too), and the process's within the step's wall time (a node's rank has one core).
        assert 0 < row["thread_cpu_s"] <= row["process_cpu_s"], row
        assert row["process_cpu_s"] < 1.02 * row["step_s"], row
    assert "largest planner error" in done.stdout
    assert " thread  others " in done.stdout
    # Two processes computing at once, one a core: each model's step with a neighbour (on a
    # machine of two cores or more), which the replanned file keeps.
    if len(os.sched_getaffinity(0)) >= 2:
        ((model, steps),) = result["co_running_steps_s"].items()
        assert len(steps) == 2 and min(steps) > 0
        assert result["co_running_step_s"] == {model: max(steps)}
        assert "two at once" in done.stdout
    # Two nodes in lockstep with almost nothing to send: each model's compute a step.
    ((model, compute),) = result["lockstep_step_s"].items()
    assert model == "tsm_resnet18" and compute > 0
    assert "two nodes in lockstep" in done.stdout
    assert (tmp_path / "net.png").read_bytes()[:4] == b"\x89PNG"

    # --replan: the same measurements predicted again, here by the same planner.
    again = tmp_path / "again"
    again.mkdir()
    cmd = [
        sys.executable,
        "-m",
        "vidscale",
        "bench",
        "network",
        "--replan",
        str(tmp_path / "net.json"),
    ]
    cmd += ["--out-json", str(again / "net.json"), "--plot", str(again / "net.png")]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    replanned = json.loads((again / "net.json").read_text())
    assert [r["predicted_step_s"] for r in replanned["rows"]] == pytest.approx(
        [r["predicted_step_s"] for r in rows]
    )
    assert [r["step_s"] for r in replanned["rows"]] == [r["step_s"] for r in rows]
    assert [r["process_cpu_s"] for r in replanned["rows"]] == [r["process_cpu_s"] for r in rows]
    assert replanned["co_running_steps_s"] == result["co_running_steps_s"]
    assert replanned["lockstep_step_s"] == result["lockstep_step_s"]


@pytest.mark.slow
def test_sigterm_mid_pass_takes_the_link_down(netns_ok: None, tmp_path: Path) -> None:
    """SIGTERM while a pass's two nodes train (the first: two nodes in lockstep) ends the
    command with 143 and its namespaces gone (`netlab.link.ending_on_sigterm`: the default
    action would leave them)."""
    cmd = [sys.executable, "-m", "vidscale", "bench", "network", *TINY, "--rates", "1gbit"]
    # The lockstep pass runs as many steps as the longer pass (here AAVG's "epoch" of 500): it
    # lasts until the signal, while the one-process passes before it measure only 2 steps.
    cmd += ["--hooks", "none", "--steps", "2", "--epoch-k", "500"]
    cmd += ["--out-json", str(tmp_path / "net.json"), "--plot", str(tmp_path / "net.png")]
    bench = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert bench.stdout is not None
        said = next((ln for ln in bench.stdout if "two nodes in lockstep" in ln), "")
        assert said, "no two-node pass started"
        time.sleep(3.0)  # the pass's agents and ranks start
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if bench.poll() is None:  # a failed check above: the command must not outlive the test
            bench.kill()
            bench.wait(timeout=60)
    assert not [ns for ns in namespaces() if ns.startswith(f"{PREFIX}{bench.pid}-")]
    assert not (tmp_path / "net.json").exists()


def test_without_namespaces_it_says_why_in_one_line(tmp_path: Path) -> None:
    from vidscale.netlab.link import unavailable

    if unavailable() is None:
        pytest.skip("namespaces can be made here: the refusal is for machines where they cannot")
    done = run_bench(tmp_path, "--rates", "1gbit")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "bench network:" in done.stderr
