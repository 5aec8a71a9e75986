"""A worker for tests/netlab/test_cluster.py: joins the job's gloo group (torchrun's
environment), all-reduces its rank + 1 and prints what it got and what it should be."""

from __future__ import annotations

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)] * 1024)
    dist.all_reduce(value)
    world = dist.get_world_size()
    print(f"allreduce world={world} got={value[0].item():g} want={world * (world + 1) / 2:g}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
