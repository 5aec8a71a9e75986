"""The threads each process computes with: the CPUs this node's processes were given, shared
among them, as training, evaluation and prediction all set them."""

from __future__ import annotations

import torch

from vidscale.config import RunConfig
from vidscale.data.media.decode import usable_cpus
from vidscale.distributed.env import DistEnv


def set_threads(cfg: RunConfig, env: DistEnv) -> None:
    """Share the CPUs this node's processes were given among them (torch defaults to every
    core of the machine in each, whatever a scheduler bound the job to)."""
    if env.device.type != "cpu":
        return
    threads = cfg.train.threads or max(1, usable_cpus() // env.local_world_size)
    torch.set_num_threads(threads)
