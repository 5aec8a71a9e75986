"""What `bench network` measures (`NetworkConfig`), and the `bench scaling` passes it runs per
link rate: one for DDP's hooks and AAVG at `aavg_k`, one for AAVG at `epoch_k` (an averaging
per epoch, AAVG paper §3: K up to one epoch)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from vidscale.bench import options
from vidscale.bench.options import option
from vidscale.bench.scaling.config import ScalingConfig
from vidscale.distributed.sync.comm_handle import HookName
from vidscale.errors import ConfigError
from vidscale.netlab.link import Rate

DEFAULT_RATES = ("unshaped", "2gbit", "500mbit", "100mbit")
DEFAULT_MODELS = ("tsm_resnet50", "tsn_resnet50", "i3d_resnet50_3x3x3")


# The compute step `--replan` starts the planner from (`report.replan`).
REPLAN_COMPUTE = ("one_process", "lockstep")


@dataclass(frozen=True)
class NetworkConfig:
    """Link rates, models and clip shape; one process per node, one core each. Each field but
    `fast_path` (`--fast-path auto|fp32`) is a flag of `bench network` (`bench.options`)."""

    rates: tuple[str, ...] = option(DEFAULT_RATES, help="link rates, e.g. unshaped,500mbit")
    models: tuple[str, ...] = option(DEFAULT_MODELS, help="registered models")
    batch: int = options.batch(2, help="clips per process")
    frames: int = options.frames(4, own=False)
    size: int = options.size(112)
    num_classes: int = options.num_classes()
    steps: int = options.steps(4, help="measured steps per run")
    warmup: int = options.warmup(2, low=2)
    hooks: tuple[HookName, ...] = option(("none", "bf16", "powersgd"), help="DDP gradient hooks")
    aavg_k: int = option(4, help="AAVG: steps per averaging", low=1)
    epoch_k: int = option(16, help="AAVG's 'an epoch' in steps (0: skip that pass)", low=0)
    bucket_cap_mb: float = option(25.0, help="DDP bucket size in MB", above=0)
    fast_path: bool = True

    def check(self) -> None:
        """A `ConfigError` naming the flag of the first bad value."""
        options.check_options(self)
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

    def lockstep_pass(self) -> ScalingConfig:
        """Two nodes computing in step with almost nothing to send: AAVG averaging once, at
        the last of as many steps as the longer pass measures (`measure._lockstep`)."""
        steps = max(self.steps, self.epoch_k)
        return replace(self.scaling(), strategies=("aavg",), aavg_k=steps, steps=steps)
