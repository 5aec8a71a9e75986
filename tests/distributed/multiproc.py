"""Run a function on N real processes joined by a gloo process group (TCP on a free port).

Rank processes are forked from a forkserver, not from the pytest process. A child forked from
pytest inherits whatever the tests before it left behind (multiprocessing queues with their
finalizers and feeder threads, loader workers, thread pools) and died in full-suite runs with
"Fatal Python error: Aborted". The forkserver is a fresh interpreter, started once per session,
that imports `PRELOAD` before it forks anything: torch, and torch._dynamo, which DDP's first
forward otherwise imports lazily in every rank (about 800 modules with sympy, 1-2 s of CPU per
rank). Measured on 2 cores, 14 tests of tests/distributed and tests/train that use two ranks:
fork 11-13 s, this forkserver 11-15 s, spawn 55 s (every rank imports torch and the rest anew).

Consequences for callers: `fn` and `args` are pickled, so `fn` must be a module-level function
of an importable module (test modules are: `tests` is a package), not a lambda or a local
function; ranks see the environment and working directory the server started with, not the
test's current ones (pass paths as absolute arguments).
"""

from __future__ import annotations

import os
import pickle
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

PRELOAD = ["torch", "torch._dynamo"]
GRACE_S = 5.0  # a rank that exited unreported may still have its result in the pipe

_CONTEXT = mp.get_context("forkserver")
# Set on import, i.e. while pytest collects, so that the preload is in place when this
# session's forkserver starts, whoever starts it (a loader test with forkserver workers may).
_CONTEXT.set_forkserver_preload(PRELOAD)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(
    rank: int, world: int, port: int, device: str, fn: Callable[..., Any], args: tuple, q: Any
) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import torch

    torch.set_num_threads(1)
    from vidscale.distributed.env import init_distributed, shutdown

    try:
        # gloo also on CUDA: several ranks may share one GPU, which NCCL refuses.
        env = init_distributed(device, timeout_s=120, backend="gloo")  # type: ignore[arg-type]
        # Plain pickle copies tensors by value (a tensor sent through the torch queue lives in
        # shared memory that disappears when this process exits).
        q.put((rank, "ok", pickle.dumps(fn(env, *args))))
    except BaseException:
        q.put((rank, "error", traceback.format_exc()))
    finally:
        # The result is in the pipe before teardown starts: a rank that crashes while leaving
        # the group shows as an exit status, never as half a message the parent waits on.
        q.close()
        q.join_thread()
        shutdown()


def _check_importable(fn: Callable[..., Any]) -> None:
    """Fail with the reason, not with a pickling error from inside multiprocessing."""
    qualname = getattr(fn, "__qualname__", repr(fn))
    if fn.__module__ == "__main__" or "<" in qualname:
        raise TypeError(
            f"run_ranks needs a module-level function of an importable module, got "
            f"{fn.__module__}.{qualname}: the rank processes import it by name"
        )


def run_ranks(
    fn: Callable[..., Any], world: int, *args: Any, timeout: float = 180, device: str = "cpu"
) -> list[Any]:
    """Call `fn(env, *args)` on `world` fresh processes; return their results in rank order.

    `device` "cuda" puts rank r on GPU r mod the GPUs there are (all on one GPU if one), still
    joined over gloo.

    Fails (AssertionError) with a rank's traceback if `fn` raised there, as soon as a rank dies
    without a result, after `timeout` seconds without all results, and if a rank exits with a
    non-zero status even after reporting (a crash in its teardown).
    """
    _check_importable(fn)
    q = _CONTEXT.Queue()
    port = free_port()
    procs = [
        _CONTEXT.Process(target=_entry, args=(r, world, port, device, fn, args, q))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        deadline = time.monotonic() + timeout
        dead_since: float | None = None
        while len(results) < world:
            try:
                rank, status, value = q.get(timeout=0.5)
            except queue.Empty:
                now = time.monotonic()
                gone = {r: p.exitcode for r, p in enumerate(procs) if r not in results}
                gone = {r: code for r, code in gone.items() if code is not None}
                if gone:
                    dead_since = dead_since or now
                    if now - dead_since > GRACE_S:
                        raise AssertionError(f"ranks exited without a result: {gone}") from None
                if now > deadline:
                    missing = sorted(set(range(world)) - set(results))
                    raise AssertionError(f"no result from ranks {missing} in {timeout} s") from None
                continue
            if status != "ok":
                raise AssertionError(f"rank {rank} failed:\n{value}")
            results[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
        q.close()
    codes = {r: p.exitcode for r, p in enumerate(procs)}
    assert set(codes.values()) == {0}, f"rank exit statuses after their results: {codes}"
    return [results[r] for r in range(world)]
