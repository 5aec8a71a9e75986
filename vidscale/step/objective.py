"""The training objective of a run, chosen once from its data: one class a clip, or a set.

Single-label runs train on the cross-entropy of the logits against `batch["label"]`;
multi-label runs (`data.multi_label`: Charades, the multi-label demo) on the binary
cross-entropy of each class's logit against the clip's multi-hot `batch["targets"]` (N, K),
the mean over clips and classes (PySlowFast's Charades loss, `bce_logit`). Both are taken in
float32 whatever the autocast.

The "top-1" a step reports is the number of clips whose highest-scoring class is right: for
one label, that it is the label; for a set, that it is one of the clip's positives (hit@1).
A thresholded per-class accuracy would be dominated by the many negatives of each clip, and
training mAP would need every clip's scores gathered; hit@1 costs one argmax and reads the
same way in both kinds of run. A multi-label clip's `label` (-1) is never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn


class Objective(Protocol):
    """A run's loss: the batch's targets on the device, the mean loss, and top-1 hits."""

    def targets(self, batch: dict[str, Any], device: torch.device) -> torch.Tensor: ...

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor: ...

    def hits(self, logits: torch.Tensor, targets: torch.Tensor) -> int: ...


@dataclass(frozen=True)
class CrossEntropy:
    """One class a clip: softmax cross-entropy against `batch["label"]` (N,)."""

    def targets(self, batch: dict[str, Any], device: torch.device) -> torch.Tensor:
        labels: torch.Tensor = batch["label"].to(device, non_blocking=True)
        return labels

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.float(), targets)

    def hits(self, logits: torch.Tensor, targets: torch.Tensor) -> int:
        # `topk`, as evaluation's `topk_hits`: ties resolve the same way in both
        return int((logits.topk(1, dim=1).indices[:, 0] == targets).sum())


@dataclass(frozen=True)
class BinaryCrossEntropy:
    """A set of classes a clip: per-class sigmoid cross-entropy against `batch["targets"]`
    (N, K) multi-hot, averaged over clips and classes."""

    def targets(self, batch: dict[str, Any], device: torch.device) -> torch.Tensor:
        if "targets" not in batch:
            raise ValueError(
                "a multi-label run got a batch without multi-hot targets (data.multi_label)"
            )
        targets: torch.Tensor = batch["targets"].to(device, non_blocking=True)
        return targets

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(logits.float(), targets.float())

    def hits(self, logits: torch.Tensor, targets: torch.Tensor) -> int:
        return int(positive_at_top(logits, targets).sum())


def positive_at_top(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Bool (N,): whether each row's highest-scoring class is one of its positives."""
    top = scores.argmax(dim=1, keepdim=True)
    return targets.gather(1, top).squeeze(1) > 0


CROSS_ENTROPY = CrossEntropy()
BINARY_CROSS_ENTROPY = BinaryCrossEntropy()


def objective_for(*, multi_label: bool) -> Objective:
    """The objective of a run whose data is multi-label or not (`data.multi_label`)."""
    return BINARY_CROSS_ENTROPY if multi_label else CROSS_ENTROPY
