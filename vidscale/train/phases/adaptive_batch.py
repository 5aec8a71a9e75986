"""Adaptive batch size (Cong et al., Alg. 1 lines 13-21 and §III-B).

Every `aavg.eval_every` epochs the averaged model is evaluated; when its accuracy a falls below
a* x b1 (a*: the best accuracy so far, starting at 0) the per-learner batch B is multiplied by
b2, up to `aavg.max_batch`; then a* takes a if a improves on it. The paper uses b1 = 1, b2 = 2
and a cap of 576: the batch grows whenever accuracy stops improving, for the smaller gradient
variance that Theorem 1's bound rewards (its second term falls as 1/B).

A learner is one of the recipe's learners: `optim.simulate_world_size` when set (the recipe's
GPUs), else one process, so a recipe keeps its per-learner batch, cap and global batch on any
process count. A new batch takes effect at the start of the next epoch, on every rank: rank 0
decides and broadcasts its decision (the evaluation it reads is the same on every rank; the
broadcast makes that a guarantee). The loader's batch grows up to `aavg.max_micro_batch`
(0: the per-learner batch), beyond it the step accumulates more micro-batches. The LR follows
`aavg.lr_rule`: `unchanged` (Adam, as the paper) or `linear` in the global batch (SGD).
The history of batch sizes and a* are part of the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vidscale.config import RunConfig
from vidscale.run.timeline import RunSizes, run_sizes


@dataclass
class AdaptiveBatch:
    """The decision rule and its state; inert unless `aavg.adaptive_batch`."""

    enabled: bool
    eval_every: int
    b1: float
    b2: int
    max_batch: int  # per learner
    learners: int
    best: float = 0.0  # a*
    # (first epoch it applies to, global batch); the first entry is the run's own.
    history: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def from_config(cls, cfg: RunConfig, *, world_size: int, global_batch: int) -> AdaptiveBatch:
        a = cfg.aavg
        learners = cfg.optim.simulate_world_size or world_size
        return cls(
            enabled=a.adaptive_batch,
            eval_every=a.eval_every,
            b1=a.b1,
            b2=a.b2,
            max_batch=a.max_batch,
            learners=learners,
            history=[(0, global_batch)],
        )

    @property
    def global_batch(self) -> int:
        return self.history[-1][1]

    def due(self, *, epochs_done: int) -> bool:
        """Whether the accuracy after `epochs_done` epochs is checked (Alg. 1 line 13)."""
        return self.enabled and epochs_done % self.eval_every == 0

    def observe(self, accuracy: float, *, epochs_done: int) -> bool:
        """Alg. 1 lines 14-20 for the accuracy after `epochs_done` epochs; True when the
        batch grows (from epoch `epochs_done` on)."""
        grew = False
        if accuracy < self.best * self.b1:
            per_learner = self.global_batch // self.learners
            grown = min(per_learner * self.b2, self.max_batch)
            if grown > per_learner:
                self.history.append((epochs_done, grown * self.learners))
                grew = True
        self.best = max(self.best, accuracy)
        return grew

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "history": [list(h) for h in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = float(state["best"])
        self.history = [(int(e), int(b)) for e, b in state["history"]]


def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest d <= cap that divides n (1 at worst)."""
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1


def sizes_for_batch(cfg: RunConfig, start: RunSizes, *, global_batch: int) -> RunSizes:
    """`start` (the run's sizes at its own batch) moved to `global_batch` on the same processes:
    the loader batch as large as `aavg.max_micro_batch` allows, the rest accumulated; the peak
    LR per `aavg.lr_rule`."""
    if global_batch == start.global_batch:
        return start
    per_process = global_batch // start.world_size
    learners = cfg.optim.simulate_world_size or start.world_size
    # A process that stands for several learners takes one micro-batch per learner.
    cap = cfg.aavg.max_micro_batch or global_batch // learners
    micro = largest_divisor_at_most(per_process, cap)
    base_lr = start.base_lr
    if cfg.aavg.lr_rule == "linear":
        base_lr = start.base_lr * global_batch / start.global_batch
    return run_sizes(
        cfg,
        world_size=start.world_size,
        train_size=start.train_size,
        global_batch=global_batch,
        micro_batch=micro,
        base_lr=base_lr,
    )
