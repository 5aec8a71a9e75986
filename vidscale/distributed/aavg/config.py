"""The `aavg` section of a run: K-step averaging, Adam/BN merging and the adaptive batch size
(Cong et al., Alg. 1-2). Apart from the strategy (`strategy.AAVGStrategy`), so that the strategy
interface and the config can name it without importing the strategy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

LrRule = Literal["unchanged", "linear"]


@dataclass
class AAVGConfig:
    """K-step averaging (Alg. 1 line 12), Adam/BN merging (Alg. 2), adaptive batch (lines 13-21).

    `k`: optimizer steps between averagings; -1 averages once per epoch, at its end (the
    paper's best, §III-A). The replicas are also averaged at every epoch end whatever `k`, so
    that evaluation and epoch checkpoints see one model.
    `merge_optimizer_state` / `merge_bn`: Alg. 2 (AAVG3); off, the optimizer state stays per
    learner and BN statistics are averaged plainly (AAVG1, AAVG2).
    `adaptive_batch`: every `eval_every` epochs the averaged model is evaluated; when its
    accuracy a < a* x `b1` (a*: the best so far) the per-learner batch is multiplied by `b2`,
    up to `max_batch` (paper: b1 = 1, b2 = 2, 576). `max_micro_batch` (0: the per-learner batch) caps
    the loader's batch: beyond it the per-learner batch grows by gradient accumulation instead.
    `lr_rule` on a batch change: `unchanged` (Adam, the paper) or `linear` (SGD, Goyal et al.).
    """

    k: int = -1
    merge_optimizer_state: bool = True
    merge_bn: bool = True
    adaptive_batch: bool = False
    eval_every: int = 1
    b1: float = 1.0
    b2: int = 2
    max_batch: int = 576
    max_micro_batch: int = 0
    lr_rule: LrRule = "unchanged"

    def validate(self) -> None:
        """Raise ValueError naming the first field whose value cannot work."""
        checks: list[tuple[bool, str]] = [
            (self.k == -1 or self.k >= 1, "k must be >= 1, or -1 (once per epoch)"),
            (self.eval_every >= 1, "eval_every must be >= 1"),
            (math.isfinite(self.b1) and self.b1 > 0, "b1 must be > 0"),
            (self.b2 >= 1, "b2 must be >= 1"),
            (self.max_batch >= 1, "max_batch must be >= 1"),
            (self.max_micro_batch >= 0, "max_micro_batch must be >= 0 (0: the learner batch)"),
            (self.lr_rule in ("unchanged", "linear"), "lr_rule must be 'unchanged' or 'linear'"),
        ]
        for ok, message in checks:
            if not ok:
                field_name = message.split()[0]
                raise ValueError(f"{message}, got {getattr(self, field_name)!r}")
