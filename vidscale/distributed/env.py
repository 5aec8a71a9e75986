"""The distributed environment, read once from torchrun's variables and passed down.

`torchrun --nproc_per_node N -m vidscale train ...` sets RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; a plain `vidscale train` sets none of them and runs as one process.
The backend is chosen from the device: NCCL for CUDA, gloo on CPU.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _pick_device(preference: Literal["auto", "cpu", "cuda"], local_rank: int) -> torch.device:
    if preference == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but no CUDA device is available")
    if preference in ("auto", "cuda") and torch.cuda.is_available():
        count = torch.cuda.device_count()
        return torch.device("cuda", local_rank % count)
    return torch.device("cpu")


def init_distributed(
    device: Literal["auto", "cpu", "cuda"] = "auto", *, timeout_s: float = 1800.0
) -> DistEnv:
    """Initialise the default process group when launched by torchrun; no-op on one process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    dev = _pick_device(device, local_rank)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
            device_id=dev if dev.type == "cuda" else None,
        )
    return DistEnv(rank, local_rank, world_size, local_world, dev, backend)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
