"""Average precision for multi-label video: per class, mean over classes, view aggregation.

Charades and other multi-label sets are scored by mean average precision (mAP) over classes
(Sigurdsson et al., "Hollywood in Homes", ECCV 2016; PySlowFast `slowfast/utils/meters.py`
`get_map`): each class ranks every test video by its score, its AP is the area under that
ranking's step-wise precision-recall curve, and classes with no positive video are left out,
since their AP is undefined.

AP here equals scikit-learn's `average_precision_score`: the sum over distinct score thresholds
t, from the highest down, of (R_t - R_prev) * P_t, with P_t and R_t the precision and recall of
"score >= t". Tied scores form one threshold, so the result does not depend on the order of the
videos. Inputs are the already gathered scores of every video once (evaluation collects them
across ranks); nothing here communicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

ViewAggregation = Literal["mean", "max"]


@dataclass(frozen=True)
class MeanAP:
    """`value`: the mean AP over the classes with at least one positive video.

    `per_class` (K,) holds each class's AP, NaN for a class without a positive;
    `classes_scored` and `classes_without_positives` count the two kinds.
    """

    value: float
    per_class: torch.Tensor
    classes_scored: int
    classes_without_positives: int


def _as_binary(targets: torch.Tensor) -> torch.Tensor:
    """`targets` as a bool tensor; only bool or 0/1 values are accepted."""
    if targets.dtype == torch.bool:
        return targets
    if targets.is_floating_point() and not bool(torch.isfinite(targets).all()):
        raise ValueError("targets must be 0 or 1, got a non-finite value")
    binary = targets != 0
    if not bool((targets[binary] == 1).all()):
        raise ValueError("targets must be bool or 0/1")
    return binary


def _check_scores(scores: torch.Tensor) -> torch.Tensor:
    if not scores.is_floating_point():
        scores = scores.double()
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores must be finite (NaN or inf found)")
    return scores.detach().to("cpu", torch.float64)


def average_precision(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """AP of one class: `scores` (N,) ranks N videos, `targets` (N,) says which are positive.

    Raises ValueError for mismatched or non-1-D shapes, non-finite scores, targets other than
    bool or 0/1, and a class with no positive (AP is undefined there).
    """
    if scores.ndim != 1 or scores.shape != targets.shape:
        raise ValueError(
            f"scores and targets must both be (N,), got {tuple(scores.shape)} and "
            f"{tuple(targets.shape)}"
        )
    scores = _check_scores(scores)
    positive = _as_binary(targets).cpu()
    total_positives = int(positive.sum())
    if total_positives == 0:
        raise ValueError("average precision is undefined for a class with no positive")
    order = torch.sort(scores, descending=True, stable=True).indices
    ranked_scores, ranked_positive = scores[order], positive[order]
    # The last video of each run of equal scores closes one threshold: every tied video is on
    # the same side of it, so its precision and recall count the whole run.
    closes_run = torch.ones_like(ranked_positive)
    closes_run[:-1] = ranked_scores[1:] != ranked_scores[:-1]
    true_positives = torch.cumsum(ranked_positive.double(), dim=0)[closes_run]
    retrieved = (torch.nonzero(closes_run).squeeze(1) + 1).double()
    precision = true_positives / retrieved
    recall_gain = torch.diff(true_positives, prepend=true_positives.new_zeros(1))
    return float((recall_gain * precision).sum() / total_positives)


def mean_average_precision(scores: torch.Tensor, targets: torch.Tensor) -> MeanAP:
    """mAP of `scores` (N, K) against `targets` (N, K): the mean over classes with at least one
    positive video of each class's `average_precision`.

    Raises ValueError for mismatched or non-2-D shapes, and when no class has a positive.
    """
    if scores.ndim != 2 or scores.shape != targets.shape:
        raise ValueError(
            f"scores and targets must both be (N, K), got {tuple(scores.shape)} and "
            f"{tuple(targets.shape)}"
        )
    positive = _as_binary(targets)
    has_positive = positive.any(dim=0).cpu()
    per_class = torch.full((scores.shape[1],), float("nan"), dtype=torch.float64)
    for k in torch.nonzero(has_positive).squeeze(1).tolist():
        per_class[k] = average_precision(scores[:, k], positive[:, k])
    scored = int(has_positive.sum())
    if scored == 0:
        raise ValueError("mean average precision is undefined: no class has a positive")
    return MeanAP(
        value=float(per_class[has_positive].mean()),
        per_class=per_class,
        classes_scored=scored,
        classes_without_positives=scores.shape[1] - scored,
    )


def aggregate_views(view_scores: torch.Tensor, how: ViewAggregation = "mean") -> torch.Tensor:
    """One score per video and class from `view_scores` (N, V, K), V views of each video:
    their mean or their maximum.

    Charades is tested on 10 temporal x 3 spatial views combined by max (PySlowFast's Charades
    configs set `DATA.ENSEMBLE_METHOD: max`). The max commutes with a monotone map such as the
    sigmoid, so it may be taken on logits or on probabilities; the mean does not.
    """
    if view_scores.ndim != 3 or view_scores.shape[1] == 0:
        raise ValueError(
            f"view_scores must be (N, V, K) with V >= 1, got {tuple(view_scores.shape)}"
        )
    if how == "mean":
        return view_scores.mean(dim=1)
    if how == "max":
        return view_scores.amax(dim=1)
    raise ValueError(f"unknown view aggregation {how!r}; expected 'mean' or 'max'")
