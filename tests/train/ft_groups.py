"""Replica groups of `vidscale train-ft` as real `torchrun` jobs, and a real lighthouse, for the
fault-tolerance tests: start, SIGKILL, restart, and read what each group logged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.distributed.multiproc import free_port
from tests.tiny_run import tiny_overrides

#: Every group's run: TSN-R18 on the tiny demo, one clip a process per step.
RUN = ["--recipe", "demo_tsm_r18_8f_b32_e20", "--set", "model.name=tsn_resnet18"]


def lighthouse_bin() -> str:
    return str(Path(sys.executable).with_name("torchft_lighthouse"))


@dataclass
class Lighthouse:
    address: str
    process: subprocess.Popen

    @classmethod
    def start(cls, log: Path, port: int | None = None) -> Lighthouse:
        """A lighthouse on 127.0.0.1 that drops a group silent for 1 s from the quorum."""
        address = f"127.0.0.1:{port or free_port()}"
        cmd = [lighthouse_bin(), "--min_replicas", "1", "--bind", address]
        cmd += ["--join_timeout_ms", "500", "--heartbeat_timeout_ms", "1000"]
        with log.open("a") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: _accepts(address), 10, f"lighthouse at {address}")
        return cls(address, process)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def _accepts(address: str) -> bool:
    import socket

    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def start_group(
    group: int,
    groups: int,
    *,
    data: Path,
    out: Path,
    lighthouse: str,
    epochs: int,
    timeout_s: float = 5.0,
    extra: tuple[str, ...] = (),
) -> subprocess.Popen:
    """`torchrun --standalone --nproc_per_node 1 -m vidscale train-ft` for `group`, in a
    session of its own (so the test can SIGKILL the agent and its worker together)."""
    overrides = [x for o in tiny_overrides(data) for x in ("--set", o)]
    overrides = [*overrides, "--set", "data.batch_size=1", "--set", f"train.epochs={epochs}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
    cmd += ["-m", "vidscale", "train-ft", *RUN, *overrides, "--out", str(out)]
    cmd += ["--lighthouse", lighthouse, "--group", str(group), "--groups", str(groups)]
    cmd += ["--timeout", str(timeout_s), *extra]
    log = (out / f"group{group}.log").open("a")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the group's torchrun agent and its workers: the workers first (torchrun starts
    each in a session of its own, so killing the agent's session alone leaves them running)."""
    for child in children(process.pid):
        os.kill(child, signal.SIGKILL)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def children(pid: int) -> list[int]:
    """The processes `pid` started, from /proc."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def records(out: Path, group: int) -> list[dict[str, Any]]:
    path = out / "ft" / f"group{group}.rank0.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(ready: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds} s for {what}")
        time.sleep(0.1)


def finish(process: subprocess.Popen, seconds: float, out: Path, group: int) -> int:
    """The group's exit status; its log's tail in the failure when it does not end in time."""
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        kill_group(process)
        tail = (out / f"group{group}.log").read_text()[-3000:]
        raise AssertionError(f"group {group} did not finish in {seconds} s:\n{tail}") from None
