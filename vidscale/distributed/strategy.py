"""Data parallelism as a strategy (`dist.strategy`), chosen once by `build_strategy`.

- `ddp` (`vidscale.distributed.sync.ddp.DDPStrategy`): synchronous data-parallel SGD (TSM paper §4),
  DDP's ring all-reduce of gradients every optimizer step, with the optional compression or
  PowerSGD hook of `comm_hooks`.
- `aavg` (`vidscale.distributed.aavg.strategy.AAVGStrategy`): K-step model averaging (Cong et al.,
  Alg. 1 and 2): local steps without gradient all-reduce, replicas averaged every K steps.

Importing this module registers every strategy (`parallel.register_strategy`), so the names it
gives (`strategy_names`) are complete: config validation, the CLI's choices and the benches
read them here. A new strategy is one module with a registered `DataParallel` subclass,
imported below.

The interface the loop calls is `vidscale.distributed.parallel.DataParallel`.
"""

from __future__ import annotations

from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.aavg.strategy import AAVGStrategy
from vidscale.distributed.env import DistConfig, DistEnv
from vidscale.distributed.parallel import STRATEGIES, DataParallel
from vidscale.distributed.sync.comm_hooks import CommConfig
from vidscale.distributed.sync.ddp import DDPStrategy

__all__ = [
    "AAVGStrategy",
    "DDPStrategy",
    "DataParallel",
    "build_strategy",
    "check_strategy_name",
    "strategy_names",
]


def strategy_names() -> tuple[str, ...]:
    """Every `dist.strategy` name: the default first, then the others in alphabetical order
    (registration order follows whichever module is imported first, so it is not used)."""
    default = DistConfig.strategy
    return (default, *sorted(name for name in STRATEGIES if name != default))


def check_strategy_name(name: str, *, field: str = "dist.strategy") -> str:
    """`name` when a strategy is registered under it; else a one-line ValueError naming
    `field` and the known names."""
    if name not in STRATEGIES:
        known = ", ".join(strategy_names())
        raise ValueError(f"{field}: unknown strategy {name!r}; known: {known}")
    return name


def build_strategy(
    env: DistEnv,
    comm: CommConfig,
    *,
    name: str = DistConfig.strategy,
    aavg: AAVGConfig | None = None,
) -> DataParallel:
    """The run's data-parallel strategy: `name` is `dist.strategy`."""
    cls = STRATEGIES[check_strategy_name(name)]
    return cls.from_config(env, comm=comm, aavg=aavg or AAVGConfig())
