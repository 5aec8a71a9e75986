"""One torchrun agent per node of a `Network` (a `TwoNodeLink` or a `Cluster`): a multi-node job
over the real links.

Each agent runs in its node's namespace, pinned to one core (`cores`, node K on
`cores[K % len(cores)]`), with `nproc` workers, and the agents meet by torchrun's c10d
rendezvous at node 0's address: node 0's agent hosts the rendezvous store (`is_host`, stated
rather than guessed, since every namespace shares the host's name), and the workers' process group is formed over the veth (gloo is told the
interface with `GLOO_SOCKET_IFNAME`, each node its own end). The job's processes are children
of this one: `stop` ends them (their whole process groups), so none outlives a harness that is
interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from vidscale.netlab.link import Network

RENDEZVOUS_PORT = 29531
# How long the other agents may go on once one has failed, before they are killed as `srun
# --kill-on-bad-exit` kills a failed job's tasks: long enough for their ranks, which find a
# pulled link within the same poll (0.5 s), to say what they lost. An agent whose node is cut off
# from the rendezvous store would otherwise wait on it for minutes (each store request 60 s,
# deaf to SIGTERM while it waits), and end the job that long after the bound docs/resilience.md
# states.
BAD_EXIT_GRACE_S = 1.0


@dataclass
class NodeJob:
    """One running torchrun agent per node; `wait` collects their exit codes and output files."""

    link: Network
    procs: list[subprocess.Popen[bytes]]
    logs: list[Path]
    started: float = field(default_factory=time.monotonic)

    def poll(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def wait(self, timeout: float | None = None, *, kill_on_bad_exit: bool = True) -> list[int]:
        """The agents' exit codes. With `kill_on_bad_exit`, an agent that fails ends the others
        `BAD_EXIT_GRACE_S` later with SIGKILL (as `srun --kill-on-bad-exit` ends a job whose
        task failed): an agent cut off from the rendezvous store would otherwise wait on it for
        minutes. On `timeout` seconds (in all) the job is stopped and
        `subprocess.TimeoutExpired` raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        failed_at: float | None = None
        while True:
            codes = self.poll()
            if all(code is not None for code in codes):
                return [int(code) for code in codes if code is not None]
            now = time.monotonic()
            if kill_on_bad_exit and any(codes):
                failed_at = now if failed_at is None else failed_at
                if now - failed_at > BAD_EXIT_GRACE_S:
                    self.stop(grace_s=0.0)  # SIGTERM waits behind a store request: kill
            if deadline is not None and now > deadline:
                self.stop()
                raise subprocess.TimeoutExpired(self.procs[0].args, timeout or 0.0)
            time.sleep(0.1)

    def output(self, node: int) -> str:
        return self.logs[node].read_text(errors="replace")

    def failure(self, codes: list[int], lines: int = 30) -> str:
        """Which node failed by itself (an exit status, not the signal that stopped the rest;
        node 0 where none did) and the end of its output (`output_ending`), for an error."""
        node = next((i for i, code in enumerate(codes) if code > 0), 0)
        return f"node {node}'s output ends:\n{output_ending(self.output(node), lines)}"

    def stop(self, *, grace_s: float = 10.0) -> None:
        """SIGTERM each agent's process group, SIGKILL what is left after `grace_s`."""
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            for proc in self.procs:
                if proc.poll() is None:
                    _signal_group(proc.pid, sig)
            deadline = time.monotonic() + wait_s
            while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
                time.sleep(0.05)


TwoNodeJob = NodeJob  # the name the two-node tests and harness know it by


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


# Set for every process of a node's job: the node's index in the network (0 first). A worker's
# rank is not its node's index: torch's c10d rendezvous ranks the nodes by their addresses as
# strings, so node 9 of 16 (address .10) comes before node 1 (.2).
NODE_ENV = "VIDSCALE_NETLAB_NODE"


def agent_command(
    link: Network,
    node: int,
    args: Sequence[str],
    *,
    nproc: int = 1,
    port: int = RENDEZVOUS_PORT,
    run_id: str = "vidscale",
    max_restarts: int = 0,
    module: str = "vidscale",
) -> list[str]:
    """The command that starts node `node`'s torchrun agent for `python -m MODULE ARGS`."""
    host = "true" if node == 0 else "false"
    return [
        *link.exec_prefix(node),
        *(sys.executable, "-m", "torch.distributed.run"),
        *("--nnodes", str(len(link.addresses)), "--nproc-per-node", str(nproc)),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"{link.addresses[0]}:{port}"),
        *("--rdzv-id", run_id, "--rdzv-conf", f"is_host={host}"),
        # The workers' store address: without it torchrun takes the host's name, which
        # resolves to loopback, the same in both namespaces.
        *("--local-addr", link.addresses[node]),
        *("--max-restarts", str(max_restarts), "--monitor-interval", "0.5"),
        *("-m", module, *args),
    ]


def start(
    link: Network,
    args: Sequence[str],
    *,
    log_dir: Path,
    cores: tuple[int, ...] | None = (0, 1),
    threads: int = 1,
    nproc: int = 1,
    max_restarts: int = 0,
    port: int = RENDEZVOUS_PORT,
    env: dict[str, str] | None = None,
    module: str = "vidscale",
) -> NodeJob:
    """Start `python -m MODULE ARGS` (vidscale's command line by default) on every node, node
    N's agent (and so its workers) pinned to core `cores[N % len(cores)]` (None: unpinned), its
    output in `log_dir/node{N}.log`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:12]
    procs, logs = [], []
    for node in range(len(link.addresses)):
        node_env = {
            **os.environ,
            **(env or {}),
            "GLOO_SOCKET_IFNAME": link.devices[node],
            NODE_ENV: str(node),  # which node a worker is on: its rank is the rendezvous's
            "OMP_NUM_THREADS": str(threads),
            "PYTHONUNBUFFERED": "1",
        }
        log = log_dir / f"node{node}.log"
        handle: IO[bytes] = log.open("wb")
        core = None if cores is None else cores[node % len(cores)]
        cmd = agent_command(
            link,
            node,
            args,
            nproc=nproc,
            port=port,
            run_id=run_id,
            max_restarts=max_restarts,
            module=module,
        )
        procs.append(
            subprocess.Popen(
                cmd,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=node_env,
                start_new_session=True,  # its own process group: `stop` ends all of it
                preexec_fn=None if core is None else _pin(core),
            )
        )
        handle.close()
        logs.append(log)
    return NodeJob(link, procs, logs)


def _pin(core: int) -> Callable[[], None]:
    def pin() -> None:
        os.sched_setaffinity(0, {core})

    return pin


# torchrun's own report of a failed child: its traceback ends in this exception, then a table.
_LAUNCHER_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
_ROOT_CAUSE_FIELDS = ("rank ", "exitcode ", "traceback ")


def output_ending(text: str, lines: int = 30) -> str:
    """The last `lines` lines of an agent's output, torchrun's own report of a failed child (a
    traceback of the launcher and a table, some 30 lines) cut to its root cause's rank, exit
    code and traceback lines: what the rank itself printed last (a C++ abort's one line, say)
    would otherwise be pushed out of view by the launcher's report."""
    found = text.splitlines()
    failed = max((i for i, line in enumerate(found) if _LAUNCHER_FAILED in line), default=None)
    if failed is None:
        return "\n".join(found[-lines:])
    start = max(
        (i for i, line in enumerate(found[:failed]) if line.startswith("Traceback (most recent")),
        default=failed,
    )
    report = [" ".join(line.split()) for line in found[failed:]]
    cause = [field for field in report if field.startswith(_ROOT_CAUSE_FIELDS)]
    own = found[:start][-max(lines - len(cause) - 1, 1) :]
    return "\n".join([*own, "torchrun: the child failed: " + "; ".join(cause)])
