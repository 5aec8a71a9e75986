"""Run a function on N real processes joined by a gloo process group (fork + TCP, free port)."""

from __future__ import annotations

import os
import pickle
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple, q: Any) -> None:
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
        env = init_distributed("cpu", timeout_s=120)
        # Plain pickle copies tensors by value (a tensor sent through the torch queue lives in
        # shared memory that disappears when this process exits).
        q.put((rank, "ok", pickle.dumps(fn(env, *args))))
    except BaseException:
        q.put((rank, "error", traceback.format_exc()))
    finally:
        shutdown()


def run_ranks(fn: Callable[..., Any], world: int, *args: Any, timeout: float = 180) -> list[Any]:
    """Call `fn(env, *args)` on `world` forked processes; return their results in rank order."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, q)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        for _ in range(world):
            rank, status, value = q.get(timeout=timeout)
            if status != "ok":
                raise AssertionError(f"rank {rank} failed:\n{value}")
            results[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]
