"""Replica groups and a lighthouse as processes: start, SIGKILL, restart, and read what each
group logged (`OUT/ft/group{G}.rank0.jsonl`). On one machine, or one per node of a
`vidscale.netlab` cluster (`prefix`: the node's `exec_prefix`, `address` and `device`: its
address and interface). What the tests and the failure measurements (`scripts/ft_measure.py`)
run; docs/fault_tolerance.md shows the same by hand."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.errors import InputError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts(address: str) -> bool:
    """Whether something accepts a TCP connection at HOST:PORT."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def listening(prefix: Sequence[str], port: int) -> bool:
    """Whether something listens on TCP `port` where `prefix` runs (a node's namespace)."""
    cmd = [*prefix, "ss", "-Hltn", f"sport = :{port}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return bool(done.stdout.strip())


# How long a quorum waits for a group that is alive (heartbeating) but has not asked to join yet.
# TorchFT's lighthouse forms a quorum at once when every live group has asked (or every member of
# the last quorum has), so this wait is paid only for a late group; a dead one is waited for only
# until `heartbeat_ms` of silence drops it. It must outlast a heal: at 500 ms three groups on
# 1 Gbit/s links took turns being left out, each healing at the next step and late again for the
# one after (docs/benchmarks.md, "A join timeout that outlasts a heal").
JOIN_TIMEOUT_MS = 5000


def lighthouse_binary() -> str:
    """torchft's `torchft_lighthouse`: beside this interpreter (a virtual environment's, not
    necessarily on PATH), else on PATH (torch and torchft installed for the host's Python)."""
    beside = Path(sys.executable).with_name("torchft_lighthouse")
    found = str(beside) if beside.is_file() else shutil.which("torchft_lighthouse")
    if found is None:
        raise InputError(
            f"torchft_lighthouse: not beside {sys.executable} nor on PATH (pip install torchft)"
        )
    return found


@dataclass
class Lighthouse:
    """`torchft_lighthouse` (`min_replicas` 1) bound to `host` (127.0.0.1, or a node's address
    with `prefix` its `exec_prefix`), dropping a group silent for `heartbeat_ms` from the
    quorum and waiting up to `join_timeout_ms` for a live group late to join one."""

    address: str
    process: subprocess.Popen

    @classmethod
    def start(
        cls,
        log: Path,
        port: int | None = None,
        *,
        heartbeat_ms: int = 1000,
        join_timeout_ms: int = JOIN_TIMEOUT_MS,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> Lighthouse:
        port = port or free_port()
        address = f"{host}:{port}"
        cmd = [*prefix, lighthouse_binary(), "--min_replicas", "1", "--bind", address]
        cmd += ["--join_timeout_ms", str(join_timeout_ms)]
        cmd += ["--heartbeat_timeout_ms", str(heartbeat_ms)]
        with log.open("a") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        lighthouse = cls(address, process)
        ready = (lambda: listening(prefix, port)) if prefix else (lambda: accepts(address))
        try:  # its console script imports torch first: seconds on a busy machine
            wait_for(ready, 120, f"the lighthouse at {address}")
        except BaseException:
            lighthouse.kill()
            raise
        return lighthouse

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def start_group(
    group: int,
    groups: int,
    *,
    run: Sequence[str],
    out: Path,
    lighthouse: str,
    timeout_s: float = 5.0,
    extra: Sequence[str] = (),
    prefix: Sequence[str] = (),
    address: str | None = None,
    device: str | None = None,
) -> subprocess.Popen:
    """`torchrun --standalone --nproc_per_node 1 -m vidscale train-ft RUN...` for `group`, in a
    session of its own; its output appended to `OUT/group{G}.log`. On a node: `prefix` its
    `exec_prefix`, `address` what the group binds and advertises (`--address`), `device` the
    interface gloo uses (`GLOO_SOCKET_IFNAME`)."""
    # --local-addr: the group's store (MASTER_ADDR), which its peers meet on, on the node's address.
    on_node = [] if address is None else ["--local-addr", address]
    cmd = [*prefix, sys.executable, "-m", "torch.distributed.run", "--standalone", *on_node]
    cmd += ["--nproc_per_node", "1", "-m", "vidscale", "train-ft", *run, "--out", str(out)]
    cmd += ["--lighthouse", lighthouse, "--group", str(group), "--groups", str(groups)]
    cmd += ["--timeout", str(timeout_s), *extra]
    cmd += [] if address is None else ["--address", address]
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"group{group}.log").open("a") as log:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        if device is not None:
            env["GLOO_SOCKET_IFNAME"] = device
        return subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL a group's torchrun agent and its workers: the workers first (torchrun starts
    each in a session of its own, so killing the agent's session alone leaves them running)."""
    for child in children(process.pid):
        with suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    with suppress(ProcessLookupError):
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
    """What group `group`'s first process logged, one record per committed (local) step."""
    path = out / "ft" / f"group{group}.rank0.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(ready: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll `ready` every 0.1 s; TimeoutError naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {seconds} s for {what}")
        time.sleep(0.1)


def finish(process: subprocess.Popen, seconds: float, out: Path, group: int) -> int:
    """The group's exit status; TimeoutError with its log's tail when it does not end in time
    (the group is killed then)."""
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        kill_group(process)
        tail = (out / f"group{group}.log").read_text()[-3000:]
        raise TimeoutError(f"group {group} did not finish in {seconds} s:\n{tail}") from None
