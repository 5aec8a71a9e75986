"""Data parallelism as a strategy (`dist.strategy`), chosen once by `build_strategy`.

- `ddp` (`vidscale.distributed.ddp.DDPStrategy`): synchronous data-parallel SGD (TSM paper §4),
  DDP's ring all-reduce of gradients every optimizer step, with the optional compression or
  PowerSGD hook of `comm_hooks`.
- `aavg` (`vidscale.distributed.aavg.AAVGStrategy`): K-step model averaging (Cong et al.,
  Alg. 1 and 2): local steps without gradient all-reduce, replicas averaged every K steps.

The interface the loop calls is `vidscale.distributed.parallel.DataParallel`.
"""

from __future__ import annotations

from vidscale.distributed.aavg import AAVGConfig, AAVGStrategy
from vidscale.distributed.comm_hooks import CommConfig
from vidscale.distributed.ddp import DDPStrategy
from vidscale.distributed.env import DistEnv
from vidscale.distributed.parallel import DataParallel

__all__ = ["AAVGStrategy", "DDPStrategy", "DataParallel", "build_strategy"]


def build_strategy(
    env: DistEnv, comm: CommConfig, *, name: str = "ddp", aavg: AAVGConfig | None = None
) -> DataParallel:
    """The run's data-parallel strategy: `name` is `dist.strategy`."""
    if name == "aavg":
        return AAVGStrategy(env, aavg or AAVGConfig())
    if name == "ddp":
        return DDPStrategy(env, comm)
    raise ValueError(f"dist.strategy must be 'ddp' or 'aavg', got {name!r}")
