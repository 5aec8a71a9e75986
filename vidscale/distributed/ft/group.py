"""One replica group's processes and its manager: the collectives a fault-tolerant step uses.

A step's exchange is one flat float32 buffer per process: the gradients (already divided by
the step's global sample count, so their sum is the global mean), the BN buffers and a few
counters (`pack`). It is summed inside the group over the group's own process group (the
sum DDP's all-reduce computes), then across the quorum's groups by TorchFT's manager, whose
all-reduce fails softly: a peer lost in it makes `should_commit` false, and nothing is applied
(`sum_over_quorum`). `unpack` writes a committed sum back: gradients as they are, BN buffers
as the mean over every process of the quorum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from vidscale.distributed.ft.settings import FTSettings


def init_group(*, world_size: int, timeout_s: float) -> None:
    """The group's own process group (gloo) when the group has several processes."""
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))


def start_manager(
    settings: FTSettings,
    *,
    rank: int,
    group_size: int,
    state_dict: Callable[[], Any],
    load_state_dict: Callable[[Any], None],
) -> Any:
    """TorchFT's `Manager` for this process: the JSON transport (`transport`), synchronous
    quorums (a rejoining group must hold its peer's data position before it picks its
    samples, so healing happens at the quorum, before the forward pass), and every timeout
    `settings.timeout_s`. With `settings.address`, the manager binds and advertises that
    address (`bound_to`); the group's store, which the peers also meet on, is advertised as
    torchrun's MASTER_ADDR:MASTER_PORT (`torchrun --local-addr` sets MASTER_ADDR, as
    `launch.start_group` does: the store is on the node of the group's first process, which for
    a group spanning nodes is not every process's own)."""
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo

    from vidscale.distributed.ft.transport import JSONTransport

    timeout = timedelta(seconds=settings.timeout_s)
    pg = ProcessGroupGloo(timeout=timeout)
    # The name torchft advertises for this group's manager (its default: the host's name).
    where = {} if settings.address is None else {"hostname": settings.address}
    with bound_to(settings.address):
        return Manager(
            pg=pg,
            load_state_dict=load_state_dict,
            state_dict=state_dict,
            min_replica_size=settings.min_groups,
            use_async_quorum=False,
            timeout=timeout,
            quorum_timeout=timeout,
            connect_timeout=timeout,
            rank=rank,
            world_size=group_size,
            lighthouse_addr=settings.lighthouse_url,
            replica_id=f"group{settings.group}",
            checkpoint_transport=JSONTransport(pg, timeout),
            init_sync=True,
            **where,
        )


@contextmanager
def bound_to(address: str | None) -> Iterator[None]:
    """While a `Manager` is made: its server bound to `address` rather than `[::]`.

    torchft 0.2.0's `Manager.__init__` binds its `ManagerServer` to `[::]:PORT` with no
    setting to change it (torchft/manager.py); the server is looked up in that module when the
    manager is made, so it is replaced there, for that call only, by one that keeps the port
    and takes `address` (DESIGN §14: the transports listen only inside the cluster)."""
    if address is None:
        yield
        return
    from torchft import manager as torchft_manager

    server = torchft_manager.ManagerServer
    host = f"[{address}]" if ":" in address else address

    def on_address(**kwargs: Any) -> Any:
        port = str(kwargs["bind"]).rpartition(":")[2]
        return server(**{**kwargs, "bind": f"{host}:{port}"})

    torchft_manager.ManagerServer = on_address  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        torchft_manager.ManagerServer = server  # type: ignore[misc]


def pack(model: nn.Module, counters: list[float]) -> torch.Tensor:
    """[gradients (zeros where none), buffers, counters] as one float32 buffer (integer
    counters stay exact below 2**24)."""
    grads = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
        for p in model.parameters()
    ]
    buffers = [b.reshape(-1) for b in model.buffers()]
    parts = [*grads, *buffers, torch.tensor(counters)]
    return torch.cat([t.to(torch.float32) for t in parts])


def sum_over_quorum(flat: torch.Tensor, manager: Any, *, group_size: int) -> None:
    """Sum `flat` in place over every process of every group in the quorum."""
    if group_size > 1:
        dist.all_reduce(flat)
    manager.allreduce(flat, reduce_op=dist.ReduceOp.SUM).wait()


def unpack(model: nn.Module, flat: torch.Tensor, *, processes: int) -> list[float]:
    """Write a summed `pack` back: gradients as they are, buffers as the mean over `processes`
    (integer counters rounded up: every BN layer counted the step); the summed counters."""
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
        offset += n
    for b in model.buffers():
        n = b.numel()
        mean = flat[offset : offset + n].view_as(b) / processes
        b.copy_(mean if b.is_floating_point() else torch.ceil(mean - 1e-6))
        offset += n
    return flat[offset:].tolist()
