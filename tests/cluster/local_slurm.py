"""A real one-node SLURM cluster for the tests: munged, slurmctld and slurmd started as root.

Debian's `slurmctld`, `slurmd`, `slurm-client` and `munge` packages (`.ci/run` installs them).
Everything the daemons write lives in one temporary directory: a generated munge key and
socket, a `slurm.conf` with this machine's host name, CPUs and memory, state, spool and logs.
Client commands find the cluster through `SLURM_CONF`. The daemons are stopped by pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "scancel", "squeue", "sinfo")
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def unavailable_reason() -> str | None:
    """Why a local cluster cannot start here, or None when it can."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if missing:
        return (
            f"SLURM is not installed ({', '.join(missing)} missing): "
            "apt-get install slurmctld slurmd slurm-client munge"
        )
    if os.geteuid() != 0:
        return "a local SLURM cluster needs root (slurmd runs jobs as their user)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _memory_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 * 9 // 10  # leave the OS its share
    raise RuntimeError("no MemTotal in /proc/meminfo")


@dataclass
class Job:
    """A job's state as `scontrol show job` reports it."""

    state: str
    restarts: int
    exit_code: str
    run_time_s: int


class LocalSlurm:
    """One controller and one compute node on this machine."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._pids: dict[str, Path] = {}

    def start(self) -> None:
        for d in ("state", "spool", "log"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._start_munged()
        self.conf.write_text(self._slurm_conf())
        self._run_daemon("slurmctld", "-i")
        self._run_daemon("slurmd")
        self._wait_for_idle_node()

    def _start_munged(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._run_daemon(
            "munged",
            "--force",
            f"--socket={self.root / 'munge.sock'}",
            f"--key-file={key}",
            f"--pid-file={self.root / 'munged.pid'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--seed-file={self.root / 'munge.seed'}",
        )

    def stop(self) -> None:
        """Cancel every job, SIGTERM each daemon by its pid file, SIGKILL what is left after
        10 s, then every process of this cluster's jobs that outlived them (a training rank
        left running would take the cores of whatever runs next: another cluster's tests)."""
        subprocess.run(["scancel", "--full", "--partition=test"], env=self.env, capture_output=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.job_processes():
            time.sleep(0.5)
        pids = []
        for path in reversed(list(self._pids.values())):  # the controller after its nodes
            if path.exists():
                pid = int(path.read_text().split()[0])
                try:
                    os.kill(pid, signal.SIGTERM)
                    pids.append(pid)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for pid in pids:
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for pid in self.job_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def daemon_pids(self) -> list[int]:
        """The pids of this cluster's daemons, as their pid files name them."""
        return [int(path.read_text().split()[0]) for path in self._pids.values() if path.exists()]

    def job_processes(self, **env: str) -> list[int]:
        """The processes of this cluster's jobs (their environment names its `slurm.conf` and a
        job id; the daemons' names only the former), optionally only those whose environment
        also holds each `NAME=value` of `env`."""
        wanted = [f"SLURM_CONF={self.conf}".encode()]
        wanted += [f"{k}={v}".encode() for k, v in env.items()]
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                environ = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            in_a_job = any(v.startswith(b"SLURM_JOB_ID=") for v in environ)  # not a daemon
            if in_a_job and all(w in environ for w in wanted):
                found.append(int(proc.name))
        return found

    def sbatch(self, *args: str, env: dict[str, str] | None = None) -> int:
        out = subprocess.run(
            ["sbatch", "--parsable", *args],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return int(out.strip().split(";")[0])

    def scontrol(self, *args: str) -> str:
        return subprocess.run(
            ["scontrol", *args], env=self.env, capture_output=True, text=True, check=True
        ).stdout

    def job(self, job_id: int) -> Job:
        text = self.scontrol("show", "job", str(job_id))
        fields = dict(re.findall(r"(\w+)=(\S+)", text))
        return Job(
            fields["JobState"],
            int(fields["Restarts"]),
            fields["ExitCode"],
            _seconds(fields["RunTime"]),
        )

    def cancel(self, job_id: int) -> None:
        """`scancel`: SIGTERM to the job's steps and batch shell, as an operator would."""
        subprocess.run(["scancel", str(job_id)], env=self.env, check=True, capture_output=True)

    def wait_until(self, job_id: int, states: set[str], timeout: float) -> Job:
        """Poll the job until it is in one of `states`; fail with the controller's view."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.state in states:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job.state} after {timeout:.0f} s")
            time.sleep(0.5)

    def start_now(self, job_id: int) -> None:
        """Let a requeued job start at once. SLURM holds a requeued job for about two minutes
        (its begin time); an operator, like this test, may move that time to now."""
        self.wait_until(job_id, {"PENDING", *TERMINAL_STATES}, timeout=120)
        # slurmd revokes a requeued job's credential as of the requeue, in whole seconds, and
        # refuses that job's credentials made in the same second ("Job credential revoked":
        # the restart dies at once, exit 1). The requeue came before the job showed PENDING,
        # so the restart is let go in the next second.
        time.sleep(1.05 - time.time() % 1.0)
        self.scontrol("update", f"JobId={job_id}", "StartTime=now")

    def _run_daemon(
        self, name: str, *args: str, prefix: tuple[str, ...] = (), pid_name: str = ""
    ) -> None:
        """Start daemon `name` (which forks and writes its pid file, ROOT/PID_NAME.pid) as
        `PREFIX name ARGS`."""
        subprocess.run([*prefix, name, *args], env=self.env, check=True, capture_output=True)
        pid_name = pid_name or name
        self._pids[pid_name] = self.root / f"{pid_name}.pid"

    def _slurm_conf(self) -> str:
        r = self.root
        return f"""\
ClusterName=vidscale-test
SlurmctldHost={self.host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r / "munge.sock"}
CryptoType=crypto/munge
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r / "slurmd.pid"}
SlurmctldLogFile={r / "log" / "slurmctld.log"}
SlurmdLogFile={r / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
KillWait=30
MinJobAge=600
NodeName={self.host} CPUs={os.cpu_count()} RealMemory={_memory_mib()} State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

    def _wait_for_idle_node(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True
            ).stdout
            if out.strip() == "idle":
                return
            time.sleep(0.3)
        log = (self.root / "log" / "slurmctld.log").read_text()[-2000:]
        raise RuntimeError(f"the local SLURM node did not become idle in 30 s:\n{log}")


def _seconds(run_time: str) -> int:
    """SLURM's `[D-]HH:MM:SS` as seconds."""
    days, _, clock = run_time.rpartition("-")
    h, m, sec = (int(x) for x in clock.split(":"))
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + sec


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
