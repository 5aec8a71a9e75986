"""Peak learning rate as a function of the global batch, one rule per optimizer.

The batch-size study (`vidscale study batch-size`, TSM paper §4.2, Figs. 4-5) trains every optimizer at
every batch with the recipe's warmup and cosine decay; only the peak rate and the update rule
differ. With B the global batch in clips:

- SGD: the recipe's linear scaling rule (TSM paper §4.1; Goyal et al., "Accurate, Large
  Minibatch SGD", §2.1): lr = lr_per_8_clips × B / 8 (on the demo recipe 0.0125 per 8 clips,
  so 0.05 at B = 32 and 1.2 at B = 768). Linear scaling keeps the expected movement per epoch
  of plain SGD, whose step grows with the gradient and shrinks with the batch's noise.
- LARS (You, Gitman, Ginsburg, arXiv 1708.03888) and LAMB (You et al., arXiv 1904.00962):
  square-root scaling from a base rate at BASE_BATCH, lr = base × sqrt(B / BASE_BATCH), the rule
  the LAMB paper uses (§4) and the one SimCLR (Chen et al., arXiv 2002.05709, App. B.1) found
  better than linear for LARS in short trainings like these. Both optimizers set each layer's
  step to a fixed fraction of its weight norm (lr × eta for LARS, lr for LAMB) whatever the
  gradient's size, so a bigger batch buys a less noisy direction, not a smaller step: what
  stays safe is keeping the step's variance per sample constant (Krizhevsky, arXiv 1404.5997),
  i.e. sqrt(B). LARS uses the recipe's trust coefficient (`optim.eta`, 1e-3).

Base rates at BASE_BATCH = 32 (the demo recipe's own batch): the best of a few 3-epoch
calibration runs of the demo recipe per optimizer (LARS 1, 8, 16; LAMB 0.02, 0.05; their
accuracies are in docs/benchmarks.md, "Batch-size study").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vidscale.schedules.lr import CLIPS_PER_BASE_LR, scaled_lr

SCALED_OPTIMIZERS: tuple[str, ...] = ("sgd", "lars", "lamb")
BASE_BATCH = 32  # the global batch at which the LARS and LAMB base rates are given
SQRT_BASE_LR: dict[str, float] = {"lars": 8.0, "lamb": 0.05}


def sqrt_scaled_lr(global_batch: int, *, base_lr: float, base_batch: int = BASE_BATCH) -> float:
    """Square-root scaling (LAMB paper §4): `base_lr` at `base_batch`, × sqrt of the batch ratio."""
    if global_batch < 1 or base_batch < 1:
        raise ValueError(f"batches must be >= 1, got {global_batch} and {base_batch}")
    return base_lr * math.sqrt(global_batch / base_batch)


@dataclass(frozen=True)
class LRRule:
    """The peak rate of one run and the rule, in words, that gave it."""

    optimizer: str
    global_batch: int
    peak_lr: float
    rule: str

    @property
    def lr_per_8_clips(self) -> float:
        """The value for `optim.lr_per_8_clips`, which the loop scales back to `peak_lr`."""
        return self.peak_lr * CLIPS_PER_BASE_LR / self.global_batch


def rule_text(optimizer: str, *, recipe_lr_per_8_clips: float) -> str:
    """The rule of `optimizer` as a formula in B, for reports."""
    if optimizer == "sgd":
        return f"linear: lr = {recipe_lr_per_8_clips:g} x B / {CLIPS_PER_BASE_LR}"
    if optimizer in SQRT_BASE_LR:
        return f"square root: lr = {SQRT_BASE_LR[optimizer]:g} x sqrt(B / {BASE_BATCH})"
    raise ValueError(f"optimizer must be one of {list(SCALED_OPTIMIZERS)}, got {optimizer!r}")


def batch_scaled_lr(optimizer: str, global_batch: int, *, recipe_lr_per_8_clips: float) -> LRRule:
    """The peak rate of `optimizer` at `global_batch`: SGD linear, LARS and LAMB square root."""
    rule = rule_text(optimizer, recipe_lr_per_8_clips=recipe_lr_per_8_clips)
    if optimizer == "sgd":
        peak = scaled_lr(recipe_lr_per_8_clips, global_batch)
    else:
        peak = sqrt_scaled_lr(global_batch, base_lr=SQRT_BASE_LR[optimizer])
    return LRRule(optimizer, global_batch, peak, rule)
