"""The multigrid knobs of a run (`--set multigrid.FIELD=VALUE`), PySlowFast's defaults.

Wu et al., "A Multigrid Method for Efficiently Training Video Models" (CVPR 2020) §3-4; the
names follow PySlowFast's `MULTIGRID` config section. `schedules.multigrid` turns them, with the
run's base shape, batch and LR schedule, into the per-epoch plan; `run.timeline` composes the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SQRT_HALF = 2**-0.5


@dataclass
class MultigridConfig:
    """Off unless `long_cycle` or `short_cycle` is set.

    `long_cycle_factors`: (frames, crop) factors of the base shape, one long-cycle stage each,
    coarsest first. `short_cycle_factors`: the two smaller crops of the short cycle relative to
    the base crop. `epoch_factor`: the run is rescaled to `train.epochs` x this many epochs (the
    paper's 1.5). `bn_base_size`: clips per BatchNorm statistic (sub-batch BN splits a larger
    per-process batch into groups of this size; 0: the base per-process batch, so the base shape
    trains with plain BN). `eval_freq`: evaluations per long-cycle shape.
    `long_cycle_sampling_rate`: the largest temporal stride of the coarsest stage (0: stride x
    base frames / frames, PySlowFast's rule). `precise_bn_batches`: batches of the base shape
    that recompute BN statistics before each evaluation (0: off).
    """

    long_cycle: bool = False
    short_cycle: bool = False
    long_cycle_factors: tuple[tuple[float, float], ...] = (
        (0.25, SQRT_HALF),
        (0.5, SQRT_HALF),
        (0.5, 1.0),
        (1.0, 1.0),
    )
    short_cycle_factors: tuple[float, float] = (0.5, SQRT_HALF)
    epoch_factor: float = 1.5
    bn_base_size: int = 8
    eval_freq: int = 3
    long_cycle_sampling_rate: int = 0
    precise_bn_batches: int = 0

    @property
    def enabled(self) -> bool:
        return self.long_cycle or self.short_cycle

    def validate(self) -> None:
        """Raise ValueError naming the first field whose value cannot work."""
        checks: list[tuple[bool, str]] = [
            (
                len(self.long_cycle_factors) >= 1
                and all(0 < t <= 1 and 0 < s <= 1 for t, s in self.long_cycle_factors),
                "long_cycle_factors must be (frames, crop) pairs in (0, 1]",
            ),
            (
                all(0 < f < 1 for f in self.short_cycle_factors),
                "short_cycle_factors must be in (0, 1)",
            ),
            (
                math.isfinite(self.epoch_factor) and self.epoch_factor > 0,
                "epoch_factor must be > 0",
            ),
            (self.bn_base_size >= 0, "bn_base_size must be >= 0"),
            (self.eval_freq >= 1, "eval_freq must be >= 1"),
            (self.long_cycle_sampling_rate >= 0, "long_cycle_sampling_rate must be >= 0"),
            (self.precise_bn_batches >= 0, "precise_bn_batches must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                name = message.split()[0]
                raise ValueError(f"{message}, got {getattr(self, name)!r}")
