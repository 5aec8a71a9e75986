"""Joining and leaving the process group (`vidscale.distributed.env`) on real gloo ranks."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist

from tests.distributed.multiproc import free_port, run_ranks
from tests.distributed.sync.test_comm_hooks import backward_on_random_batch, deep_model
from vidscale.distributed.env import DistEnv, init_distributed, shutdown
from vidscale.distributed.sync.comm_hooks import CommConfig, attach_comm_hook
from vidscale.distributed.sync.ddp import wrap_ddp


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
