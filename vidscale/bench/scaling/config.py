"""What `bench scaling` measures (`ScalingConfig`) and the variants each world size runs: the
request shared by the launcher (`scaling.measure`), the workers (`scaling.worker`,
`scaling.data`) and the report (`scaling.report`), so that none of them imports another for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from vidscale.bench import options
from vidscale.bench.options import option
from vidscale.data.layouts import VIDEO_LAYOUTS
from vidscale.data.layouts.generic import GENERIC
from vidscale.distributed.strategy import DDPStrategy, strategy_names
from vidscale.distributed.sync.comm_handle import HookName

if TYPE_CHECKING:  # torch-heavy: imported where used, so the CLI starts without them
    from vidscale.fastpath.trials import ProbeShape
    from vidscale.models.registry import ModelConfig

HOOKS: tuple[HookName, ...] = ("none", "fp16", "bf16", "powersgd")
STRATEGIES: tuple[str, ...] = strategy_names()
SINGLE = "single"  # the one-process baseline: no strategy at all


@dataclass(frozen=True)
class ScalingConfig:
    """What `bench scaling` measures. `procs` () and `threads` 0 are resolved for the device by
    `resolve`; `batch` is per process (weak scaling); `hooks` apply to the DDP strategy. Each
    field but the fast path's (`--fast-path`) is a flag of `bench scaling` (`bench.options`)."""

    models: tuple[str, ...] = option(("tsm_resnet50",), help="registered models")
    procs: tuple[int, ...] = option(
        (),
        help="process counts to launch, 1,2,4 (default: 1, 2, 4, ... up to the cores, or the "
        "GPUs); under torchrun: its world size",
        low=1,
        flag="nproc",
    )
    steps: int = options.steps(8, help="measured steps")
    warmup: int = options.warmup(3)
    batch: int = options.batch(8, help="clips per process")
    frames: int = options.frames(8, own=False)
    size: int = options.size()
    num_classes: int = options.num_classes()
    threads: int = option(0, help="threads per process (0: cores / most processes)", low=0)
    workers: int = option(0, help="loader processes", low=0)
    hooks: tuple[HookName, ...] = option(("none", "bf16", "powersgd"), help="DDP gradient hooks")
    strategies: tuple[str, ...] = option(STRATEGIES, help="strategies", choices=STRATEGIES)
    aavg_k: int = option(4, help="AAVG: steps per averaging", low=1)
    device: Literal["auto", "cpu", "cuda"] = option("auto", help="where the processes run")
    fast_path: bool = True
    bucket_cap_mb: float = option(25.0, help="DDP bucket size in MB", above=0)
    seed: int = option(0, help="seeds the model and the clips", low=0)
    fast_settings: tuple[str, ...] = ()  # "MODEL=SETTING", e.g. "tsm_resnet50=bf16+cl"
    data: str = option(
        "",
        help="a dataset every process reads its training clips from, as `vidscale train` does "
        "(its classes set --num-classes; default: random clips in memory)",
    )
    source: Literal["videos", "shards", "stream"] = option(
        "videos", help="with --data: decode its videos, or read a prepared directory"
    )
    layout: str = option(
        GENERIC, help="with --data and --source videos: the dataset's layout", choices=VIDEO_LAYOUTS
    )

    @property
    def multi_label(self) -> bool:
        """Whether the measured steps train on label sets: `data` read with a multi-label
        layout (random clips have one label each)."""
        from vidscale.data.layouts import layout

        return bool(self.data) and layout(self.layout).multi_label

    def fast_setting(self, model: str) -> str | None:
        """The fast-path setting `model` runs with ("fp32", "bf16+cl", ...), None if undecided."""
        for item in self.fast_settings:
            name, _, label = item.partition("=")
            if name == model:
                return label
        return None

    def model_config(self, name: str) -> ModelConfig:
        """The model every process trains (and the probe times)."""
        from vidscale.models.registry import ModelConfig

        return ModelConfig(name=name, num_classes=self.num_classes, frames=self.frames)

    def probe_shape(self) -> ProbeShape:
        """One process's batch and clip shape, as the fast-path probe takes it."""
        from vidscale.fastpath.trials import ProbeShape

        return ProbeShape(self.batch, 3, self.frames, self.size, self.num_classes)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Variant:
    """How the processes share training: `single` (one process, no communication), `ddp` with
    a gradient hook, or `aavg` averaging every `k` steps."""

    strategy: str  # SINGLE or a registered strategy name
    hook: HookName = "none"
    k: int = 0

    @property
    def label(self) -> str:
        if self.strategy == SINGLE:
            return "1 process"
        if self.strategy == DDPStrategy.name:
            return self.strategy if self.hook == "none" else f"{self.strategy}+{self.hook}"
        return f"{self.strategy} k={self.k}"

    def as_dict(self) -> dict[str, Any]:
        return {"variant": self.label, "strategy": self.strategy, "hook": self.hook, "k": self.k}


def variants(cfg: ScalingConfig, *, procs: int) -> list[Variant]:
    """What runs with `procs` processes: one process runs alone, the baseline of every variant."""
    if procs == 1:
        return [Variant(SINGLE)]
    out: list[Variant] = []
    for strategy in cfg.strategies:
        if strategy == DDPStrategy.name:
            out += [Variant(strategy, hook) for hook in cfg.hooks]
        else:
            out.append(Variant(strategy, k=cfg.aavg_k))
    return out
