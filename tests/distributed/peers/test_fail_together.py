"""Failure propagation and restarts on real process groups (gloo, two fresh interpreters).

Each rank runs tests/distributed/peers/rank_script.py, started either with the launcher's
variables set by hand (as an `srun` wrapper does) or by torchrun; nothing is forked from pytest.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from vidscale.distributed.env import DistConfig, DistEnv
from vidscale.distributed.peers.failure import DEFAULT_POLL_S, fail_together, poll_interval

REPO = Path(__file__).resolve().parents[3]
SCRIPT = Path(__file__).with_name("rank_script.py")
FREEZE_SILENCE_S = 2.0  # rank_script.py's
LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# From the failing rank's raise to the other rank's exit: poll 0.2 s, up to 2 s of the exit handler
# waiting for gloo to let go of the group (`distributed.env._RELEASE_WAIT_S`), a loaded machine.
PROMPT_S = 7.0


def clean_env() -> dict[str, str]:
    """This environment without any launcher's variables, one thread per process."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LAUNCH_VARS and not k.startswith("TORCHELASTIC_")
    }
    env["OMP_NUM_THREADS"] = "1"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Exited:
    returncode: int
    at: float  # time.time() when the process was seen to end
    stdout: str
    stderr: str


def run_plain(tmp_path: Path, *args: str, timeout: float = 60) -> list[Exited]:
    """Start two ranks with the launcher's variables set by hand; wait for both."""
    port = str(free_port())
    procs, logs = [], []
    for rank in range(2):
        env = clean_env()
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        out, err = tmp_path / f"rank{rank}.out", tmp_path / f"rank{rank}.err"
        logs.append((out, err))
        with out.open("w") as fo, err.open("w") as fe:
            cmd = [sys.executable, str(SCRIPT), *args]
            procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fo, stderr=fe))
    ended: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(ended) < len(procs) and time.monotonic() < deadline:
            for rank, proc in enumerate(procs):
                if rank not in ended and proc.poll() is not None:
                    ended[rank] = time.time()
            time.sleep(0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert len(ended) == len(procs), f"ranks still running after {timeout} s: {sorted(ended)}"
    return [
        Exited(proc.returncode, ended[rank], logs[rank][0].read_text(), logs[rank][1].read_text())
        for rank, proc in enumerate(procs)
    ]


def run_torchrun(*args: str, max_restarts: int = 0, timeout: float = 90) -> Exited:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "--max-restarts",
        str(max_restarts),
        str(SCRIPT),
        *args,
    ]
    proc = subprocess.run(
        cmd, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    return Exited(proc.returncode, time.time(), proc.stdout, proc.stderr)


def failing_at(text: str) -> float:
    match = re.search(r"failing at (\d+\.\d+)", text)
    assert match, text[-3000:]
    return float(match.group(1))


def test_dist_config_validates_its_timeout() -> None:
    DistConfig().validate()
    assert DistConfig().timeout_s == 600.0
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout_s"):
            DistConfig(timeout_s=bad).validate()


def test_the_poll_interval_keeps_the_store_load_bounded_at_scale() -> None:
    assert poll_interval(2) == poll_interval(25) == DEFAULT_POLL_S
    assert poll_interval(1000) == pytest.approx(20.0)  # 4 requests a poll
    for ranks in (2, 64, 512, 2304, 10_000):  # the TSM paper's largest run: 2,304 GPUs
        assert 4 * ranks / poll_interval(ranks) <= 200.0 + 1e-9
    with pytest.raises(ValueError, match="world_size >= 1"):
        poll_interval(0)


def test_fail_together_on_one_process_only_lets_the_exception_through() -> None:
    import torch

    env = DistEnv(0, 0, 1, 1, torch.device("cpu"), "gloo")
    with fail_together(env):
        pass
    with pytest.raises(KeyError), fail_together(env):
        raise KeyError("x")


@pytest.mark.slow
@pytest.mark.parametrize("fail_rank", [0, 1])  # 0 hosts the store; 1 does not
def test_plain_launch_a_failing_rank_stops_the_other_promptly(
    tmp_path: Path, fail_rank: int
) -> None:
    cleanup_s = 8.0  # the failing rank stays alive (sockets open) this long after raising
    ranks = run_plain(tmp_path, "fail", "--fail-rank", str(fail_rank), "--cleanup-s", "8")
    failed, other = ranks[fail_rank], ranks[1 - fail_rank]
    t_fail = failing_at(failed.stdout)
    assert other.returncode != 0
    assert other.at - t_fail < PROMPT_S < cleanup_s
    line = f"vidscale: rank {fail_rank} failed (RuntimeError: planted failure); stopping rank"
    assert f"{line} {1 - fail_rank}" in other.stderr
    assert failed.returncode != 0 and "RuntimeError: planted failure" in failed.stderr
    for rank in ranks:
        assert "Fatal Python error" not in rank.stderr


@pytest.mark.slow
def test_an_error_after_another_ranks_report_is_its_line_not_a_traceback(tmp_path: Path) -> None:
    # Rank 1 fails first and reports; rank 0 then raises its own error (as a collective whose
    # peer closed its sockets does) before its watcher's next poll: one line, exit 1.
    failed, other = reversed(run_plain(tmp_path, "consequence", "--fail-rank", "1"))
    assert "RuntimeError: planted failure" in failed.stderr
    line = "vidscale: rank 1 failed (RuntimeError: planted failure); stopping rank 0"
    assert line in other.stderr, other.stderr[-3000:]
    assert other.returncode == 1 and "Traceback" not in other.stderr, other.stderr[-3000:]


@pytest.mark.slow
def test_plain_launch_a_killed_store_host_stops_the_other_promptly(tmp_path: Path) -> None:
    # Rank 0 hosts the store and dies without a word: the other rank's collective or its
    # watcher finds out, whichever is first.
    killed, other = run_plain(tmp_path, "kill", "--fail-rank", "0")
    assert killed.returncode == -9
    assert other.returncode != 0
    assert other.at - failing_at(killed.stdout) < PROMPT_S
    assert "Fatal Python error" not in other.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fail_rank", [0, 1])  # 0 hosts the store; 1 does not
def test_plain_launch_a_silent_rank_is_lost_and_the_other_stops(
    tmp_path: Path, fail_rank: int
) -> None:
    # The frozen rank is alive with its sockets open, as behind a link that went down: no
    # exception anywhere, and the other rank's all-reduce would wait for the 30 s collective
    # timeout. Its heartbeat (or, for the store's host, the store's answer) stops instead.
    killed_after_s = 15.0
    ranks = run_plain(
        tmp_path, "freeze", "--fail-rank", str(fail_rank), "--cleanup-s", str(killed_after_s)
    )
    frozen, other = ranks[fail_rank], ranks[1 - fail_rank]
    assert frozen.returncode == -9  # it never woke up: the helper killed it
    waited = other.at - failing_at(frozen.stdout)
    assert FREEZE_SILENCE_S <= waited < FREEZE_SILENCE_S + PROMPT_S < killed_after_s
    assert other.returncode == 1
    lost = "the store in rank 0 (no answer for 2 s)" if fail_rank == 0 else "rank 1 (no heartbeat"
    assert f"vidscale: rank {1 - fail_rank} lost {lost}" in other.stderr, other.stderr[-3000:]
    assert other.stderr.strip().endswith(f"stopping rank {1 - fail_rank}")


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "code"), [("clean", 0), ("agreed", 3)])
def test_plain_launch_ranks_leaving_together_are_not_a_failure(
    tmp_path: Path, scenario: str, code: int
) -> None:
    # Rank 1 leaves 2 s after rank 0, whose process hosts the store: it must stay until
    # rank 1 is out, and an expected exception must not be reported.
    ranks = run_plain(tmp_path, scenario)
    for rank in ranks:
        assert rank.returncode == code, rank.stderr[-3000:]
        assert "vidscale:" not in rank.stderr
        assert "Fatal Python error" not in rank.stderr


@pytest.mark.slow
def test_torchrun_a_failing_rank_stops_the_other_promptly() -> None:
    result = run_torchrun("fail", "--fail-rank", "1", "--cleanup-s", "30")
    assert result.returncode != 0
    assert result.at - failing_at(result.stdout) < PROMPT_S + 2  # + torchrun's own shutdown
    line = "vidscale: rank 1 failed (RuntimeError: planted failure); stopping rank 0"
    assert line in result.stderr, result.stderr[-3000:]
    assert "Fatal Python error" not in result.stderr


@pytest.mark.slow
def test_torchrun_restarted_group_joins_and_all_reduces() -> None:
    # torchrun keeps one store for all attempts; the second attempt must not read the first
    # one's keys (it failed with "Connection refused" or hung in gloo's connect before).
    result = run_torchrun("restart", max_restarts=1)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exitcode: -9" in result.stderr  # the first attempt really lost rank 1
    for rank in (0, 1):
        assert f"rank {rank} attempt 1 ok" in result.stdout
    assert "Fatal Python error" not in result.stderr
