"""Every knob of a multigrid run (`MultigridSpec`, PySlowFast's defaults) and the numbers its
schedule is built from; `multigrid.multigrid_schedule` turns a spec into the schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

BNMode = Literal["batchnorm", "sub_batchnorm", "sync_batchnorm"]
LRPolicy = Literal["steps", "cosine"]

SQRT_HALF = 0.5**0.5  # PySlowFast writes the factor as 0.5 ** 0.5 (the same double as 2 ** -0.5)
DEFAULT_LONG_CYCLE_FACTORS: tuple[tuple[float, float], ...] = (
    (0.25, SQRT_HALF),
    (0.5, SQRT_HALF),
    (0.5, 1.0),
    (1.0, 1.0),
)
DEFAULT_SHORT_CYCLE_FACTORS: tuple[float, float] = (0.5, SQRT_HALF)


@dataclass(frozen=True)
class MultigridSpec:
    """Every knob of a multigrid run; the defaults are PySlowFast's (config/defaults.py).

    The base shape is `frames` x `crop`² with `global_batch` clips per step over `num_devices`
    devices (PySlowFast DATA.NUM_FRAMES, DATA.TRAIN_CROP_SIZE, TRAIN.BATCH_SIZE, NUM_GPUS), the
    plain run `max_epoch` epochs (SOLVER.MAX_EPOCH, before `epoch_factor`).

    LR: `base_lr` x a relative factor. `steps` policy: the LR stage i covers
    [steps[i], steps[i+1]) (the last one up to `max_epoch`) at `lrs[i]` x `base_lr`; `steps`
    starts at 0 and holds integer epochs; `lrs` may be longer than `steps` (PySlowFast configs
    list six) and defaults to 0.1**i (PySlowFast actually ignores SOLVER.LRS under the long
    cycle and uses SOLVER.GAMMA**i, which is the same for every shipped config). `cosine`
    policy: from `base_lr` to `cosine_end_lr` over the (rescaled) run, measured from the warmup's
    end when `cosine_after_warmup`; `steps`, if given, only mark where long cycles end.
    Warmup: linear from `warmup_start_lr` over the first `warmup_epochs` epochs (not rescaled).

    Data: `sampling_rate` is the base temporal stride; `long_cycle_sampling_rate` > 0 sets the
    largest random stride when the long cycle is off (with it on, PySlowFast computes it per
    shape and so does this module). `jitter_scales` is the short-side scale range at the base
    crop.
    """

    frames: int
    crop: int
    global_batch: int
    num_devices: int
    sampling_rate: int
    max_epoch: int
    base_lr: float
    lr_policy: LRPolicy = "steps"
    steps: tuple[float, ...] = ()
    lrs: tuple[float, ...] = ()
    cosine_end_lr: float = 0.0
    cosine_after_warmup: bool = False
    warmup_epochs: float = 0.0
    warmup_start_lr: float = 0.0
    long_cycle: bool = True
    short_cycle: bool = True
    long_cycle_factors: tuple[tuple[float, float], ...] = DEFAULT_LONG_CYCLE_FACTORS
    short_cycle_factors: tuple[float, float] = DEFAULT_SHORT_CYCLE_FACTORS
    epoch_factor: float = 1.5
    bn_base_size: int = 8
    eval_freq: int = 3
    long_cycle_sampling_rate: int = 0
    jitter_scales: tuple[int, int] = (256, 320)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first field whose value cannot work."""
        for ok, message in (*self._run_checks(), *self._lr_checks(), *self._cycle_checks()):
            if not ok:
                name = message.split()[0]
                raise ValueError(f"{message}, got {getattr(self, name)!r}")

    def _run_checks(self) -> list[tuple[bool, str]]:
        """The base shape, batch, devices and length."""
        return [
            (self.frames >= 1, "frames must be >= 1"),
            (self.crop >= 1, "crop must be >= 1"),
            (self.global_batch >= 1, "global_batch must be >= 1"),
            (self.num_devices >= 1, "num_devices must be >= 1"),
            (
                self.global_batch % self.num_devices == 0,
                "global_batch must be a multiple of num_devices",
            ),
            (self.sampling_rate >= 1, "sampling_rate must be >= 1"),
            (self.max_epoch >= 1, "max_epoch must be >= 1"),
        ]

    def _lr_checks(self) -> list[tuple[bool, str]]:
        """The learning-rate policy, its steps and its warmup."""
        return [
            (math.isfinite(self.base_lr) and self.base_lr > 0, "base_lr must be > 0"),
            (self.lr_policy in ("steps", "cosine"), "lr_policy must be 'steps' or 'cosine'"),
            (self._steps_ok(), "steps must be integer epochs, increasing, from 0 to max_epoch"),
            (
                not self.lrs or len(self.lrs) >= len(self.steps),
                "lrs must be empty or give one relative LR per step",
            ),
            (all(math.isfinite(x) and x >= 0 for x in self.lrs), "lrs must be >= 0"),
            (
                math.isfinite(self.cosine_end_lr) and 0 <= self.cosine_end_lr < self.base_lr,
                "cosine_end_lr must be in [0, base_lr)",
            ),
            (
                math.isfinite(self.warmup_epochs) and self.warmup_epochs >= 0,
                "warmup_epochs must be >= 0",
            ),
            (
                math.isfinite(self.warmup_start_lr) and self.warmup_start_lr >= 0,
                "warmup_start_lr must be >= 0",
            ),
        ]

    def _cycle_checks(self) -> list[tuple[bool, str]]:
        """The long and short cycles, BN, evaluation and the clips' strides and jitter."""
        return [
            (
                len(self.long_cycle_factors) >= 1
                and all(t > 0 and s > 0 for t, s in self.long_cycle_factors)
                and all(
                    round(self.frames * t) >= 1 and round(self.crop * s) >= 1
                    for t, s in self.long_cycle_factors
                ),
                "long_cycle_factors must be positive (frames, crop) factors of at least 1 x 1",
            ),
            (
                len(self.short_cycle_factors) == 2
                and all(f > 0 and round(self.crop * f) >= 1 for f in self.short_cycle_factors),
                "short_cycle_factors must be two positive crop factors",
            ),
            (
                math.isfinite(self.epoch_factor) and self.epoch_factor > 0,
                "epoch_factor must be > 0",
            ),
            (self.bn_base_size >= 1, "bn_base_size must be >= 1"),
            (self.eval_freq >= 1, "eval_freq must be >= 1"),
            (
                self.long_cycle_sampling_rate == 0
                or self.long_cycle_sampling_rate >= self.sampling_rate,
                "long_cycle_sampling_rate must be 0 or >= sampling_rate",
            ),
            (
                len(self.jitter_scales) == 2
                and 1 <= self.jitter_scales[0] <= self.jitter_scales[1],
                "jitter_scales must be (min, max) with 1 <= min <= max",
            ),
        ]

    def _steps_ok(self) -> bool:
        if not self.steps:
            return self.lr_policy == "cosine"
        return (
            self.steps[0] == 0
            and all(float(s).is_integer() for s in self.steps)
            and all(a < b for a, b in zip(self.steps, self.steps[1:], strict=False))
            and self.steps[-1] <= self.max_epoch
        )

    @property
    def per_device_batch(self) -> int:
        """Clips per device per step at the base shape."""
        return self.global_batch // self.num_devices

    def baseline(self) -> MultigridSpec:
        """The same run without multigrid: the reference of `iteration_saving`/`flop_saving`."""
        return replace(self, long_cycle=False, short_cycle=False)

    def relative_lr(self, step_index: int) -> float:
        """The relative LR of LR stage `step_index` (`lrs`, else 0.1**i like SOLVER.GAMMA).

        Past the end of `lrs` the last value holds: only the empty fine-tune of a run without
        steps (one long cycle, `steps` = (0,)) asks for it."""
        if self.lrs:
            return float(self.lrs[min(step_index, len(self.lrs) - 1)])
        return 0.1**step_index
