"""What `bench network` measures (`NetworkConfig`), and the `bench scaling` passes it runs per
link rate: one for DDP's hooks and AAVG at `aavg_k`, one for AAVG at `epoch_k` (an averaging
per epoch, AAVG paper §3: K up to one epoch)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from vidscale.bench.scaling.config import ScalingConfig
from vidscale.distributed.comm_handle import HookName
from vidscale.errors import ConfigError
from vidscale.netlab.link import Rate

DEFAULT_RATES = ("unshaped", "2gbit", "500mbit", "100mbit")
DEFAULT_MODELS = ("tsm_resnet50", "tsn_resnet50", "i3d_resnet50_3x3x3")


@dataclass(frozen=True)
class NetworkConfig:
    """Link rates, models and clip shape; one process per node, one core each."""

    rates: tuple[str, ...] = DEFAULT_RATES
    models: tuple[str, ...] = DEFAULT_MODELS
    batch: int = 2
    frames: int = 4
    size: int = 112
    num_classes: int = 400
    steps: int = 4
    warmup: int = 2
    hooks: tuple[HookName, ...] = ("none", "bf16", "powersgd")
    aavg_k: int = 4
    epoch_k: int = 16  # AAVG's "K = an epoch": this many steps per averaging (0: skip the pass)
    bucket_cap_mb: float = 25.0
    fast_path: bool = True

    def check(self) -> None:
        """A `ConfigError` naming the flag of the first bad value."""
        for rate in self.rates:
            try:
                Rate.parse(rate)
            except ValueError as err:
                raise ConfigError(f"--rates: {err}") from None
        if not self.rates:
            raise ConfigError("--rates: name at least one rate")
        if self.epoch_k and self.epoch_k % self.aavg_k:
            raise ConfigError(
                f"--epoch-k: a multiple of --aavg-k ({self.aavg_k}), got {self.epoch_k}"
            )

    def scaling(self) -> ScalingConfig:
        """The `bench scaling` request of the DDP-and-AAVG-at-k pass (1 thread per process)."""
        return ScalingConfig(
            models=self.models,
            steps=self.steps,
            warmup=self.warmup,
            batch=self.batch,
            frames=self.frames,
            size=self.size,
            num_classes=self.num_classes,
            threads=1,
            hooks=self.hooks,
            strategies=("ddp", "aavg"),
            aavg_k=self.aavg_k,
            device="cpu",
            fast_path=self.fast_path,
            bucket_cap_mb=self.bucket_cap_mb,
        )

    def passes(self) -> list[ScalingConfig]:
        """Every pass a two-node world runs at one rate."""
        first = self.scaling()
        if not self.epoch_k:
            return [first]
        epoch = replace(first, strategies=("aavg",), aavg_k=self.epoch_k, steps=self.epoch_k)
        return [first, epoch]
