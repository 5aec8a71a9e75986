"""Joining and leaving the process group (`vidscale.distributed.env`) on real gloo ranks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from tests.distributed.multiproc import free_port, run_ranks
from tests.distributed.sync.test_comm_hooks import backward_on_random_batch, deep_model
from vidscale.distributed.env import DistEnv, init_distributed, shutdown
from vidscale.distributed.sync.comm_hooks import CommConfig, attach_comm_hook
from vidscale.distributed.sync.ddp import wrap_ddp

ROOT = Path(__file__).resolve().parents[2]


def powersgd_teardown_cycles(env: DistEnv, cycles: int) -> int:
    """Join, take PowerSGD steps, leave; `cycles` times in one process. Returns the count."""
    for cycle in range(cycles):
        if cycle:
            env = init_distributed("cpu", timeout_s=60)
        # The next cycle's store on a port of its own: no rank can reach this cycle's store.
        port: list[int | None] = [free_port() if env.rank == 0 else None]
        dist.broadcast_object_list(port)
        ddp = wrap_ddp(deep_model(), env, bucket_cap_mb=0.01)
        attach_comm_hook(ddp, CommConfig(hook="powersgd", powersgd_rank=2, powersgd_start_step=2))
        for step in range(4):
            backward_on_random_batch(ddp, env, step, features=48)
        del ddp  # leave right after the last step's callbacks, as a run's end does
        shutdown()
        os.environ["MASTER_PORT"] = str(port[0])
    return cycles


@pytest.mark.slow
def test_leaving_the_group_right_after_powersgd_steps_does_not_abort() -> None:
    """Gloo releases PowerSGD's chained callbacks, which hold the group, on its worker threads,
    possibly after the training thread destroyed the group: without `shutdown` keeping the
    group, its destructor ran on its own worker thread and aborted the process ("Resource
    deadlock avoided") within a few cycles."""
    assert run_ranks(powersgd_teardown_cycles, 2, 25, timeout=150) == [25, 25]


def release_at_exit(env: DistEnv, cycles: int) -> list[int]:
    """PowerSGD cycles, then what the exit handler leaves: the retired groups before and after."""
    from vidscale.distributed import env as env_module

    powersgd_teardown_cycles(env, cycles)
    before = len(env_module._retired_groups)
    deadline = time.monotonic() + 20.0  # gloo lets go within milliseconds; a loaded machine
    while env_module._retired_groups and time.monotonic() < deadline:
        env_module._release_retired_groups()  # each call waits up to _RELEASE_WAIT_S
    return [before, len(env_module._retired_groups)]


@pytest.mark.slow
def test_retired_groups_are_destroyed_before_the_interpreter_finalizes() -> None:
    """The exit handler destroys every retired group on the main thread once gloo's threads have
    let go of it: left to finalization, a gloo thread needing the GIL there aborts the process."""
    assert run_ranks(release_at_exit, 2, 3, timeout=120) == [[3, 0], [3, 0]]


LEAVES_WITHOUT_SHUTDOWN = """
import atexit, sys


def report() -> None:
    import torch.distributed as dist
    from vidscale.distributed import env as env_module

    retired = len(env_module._retired_groups)
    print(f"at exit: in group {dist.is_initialized()}, retired {retired}", flush=True)


# Registered before vidscale is imported, so it runs after every exit handler vidscale registers.
atexit.register(report)
import torch
import torch.distributed as dist
from vidscale.distributed.env import init_distributed

env = init_distributed("cpu", timeout_s=60)
buffer = torch.ones(1000)
dist.all_reduce(buffer)
assert float(buffer[0]) == env.world_size
sys.exit(0)  # no shutdown(): the process leaves with the group alive
"""


@pytest.mark.slow
def test_a_process_that_never_calls_shutdown_leaves_its_group_as_it_exits(
    tmp_path: Path,
) -> None:
    """`init_distributed` registers the leaving itself: at exit the group is left and destroyed
    on the main thread, before the interpreter finalizes (a gloo group left to finalization can
    abort the process)."""
    script = tmp_path / "leave.py"
    script.write_text(LEAVES_WITHOUT_SHUTDOWN)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("at exit: in group False, retired 0") == 2, done.stdout
