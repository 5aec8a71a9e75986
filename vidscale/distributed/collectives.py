"""Small collectives used by the loop; each is the identity on one process."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Processes in the default group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over ranks, in place, and return it."""
    if _active():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(value: float) -> float:
    if not _active():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order (a list of one on a single process)."""
    if not _active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, *, src: int = 0) -> Any:
    if not _active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if _active():
        dist.barrier()


def broadcast_buffers(module: torch.nn.Module, *, src: int = 0) -> None:
    """Give every rank rank `src`'s buffers (BN running statistics drift apart between ranks)."""
    if not _active():
        return
    for buf in module.buffers():
        dist.broadcast(buf, src=src)
