"""What an item says about its classes: `"label"` for single-label data, and for multi-label data
also `"targets"`, the clip's multi-hot positives (see docs/design.md, "Multi-label data").

- Single-label record (`label_set` None): `{"label": class}`, as always.
- Multi-label record: `{"label": NO_SINGLE_LABEL, "targets": float32 (K,)}` with 1 for each
  positive. A training clip of a timed record (Charades) has the actions overlapping its first
  to last sampled frame as positives (`LabelSet.for_clip`, times = frame / fps); evaluation, and
  every clip of an untimed record, has the video's whole set.

`collate` stacks the rows' targets into (N, K). The datasets call these helpers, so the rule
lives in one place whatever the storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from vidscale.data.clip import Modality, SampledClip, frame_span
from vidscale.data.label_sets import NO_SINGLE_LABEL, LabelSet


def check_label_sets(label_sets: Sequence[LabelSet | None], num_classes: int) -> bool:
    """Whether the records are multi-label; ValueError when only some are, when they are and
    `num_classes` is not given (>= 1), or when a positive is not a class index below it."""
    given = sum(s is not None for s in label_sets)
    if given == 0:
        return False
    if given != len(label_sets):
        raise ValueError(f"{given} of {len(label_sets)} records have label sets: all or none")
    if num_classes < 1:
        raise ValueError("multi-label records need num_classes (the class count) >= 1")
    for s in label_sets:
        assert s is not None
        bad = [c for c in s.labels | {g.label for g in s.segments} if not 0 <= c < num_classes]
        if bad:
            raise ValueError(f"label {bad[0]} is not a class index below {num_classes}")
    return True


def multi_hot(labels: frozenset[int], num_classes: int) -> torch.Tensor:
    """float32 (num_classes,): 1 at each of `labels`, 0 elsewhere."""
    targets = torch.zeros(num_classes, dtype=torch.float32)
    if labels:
        targets[sorted(labels)] = 1.0
    return targets


def clip_span_s(clip: SampledClip, fps: float, modality: Modality) -> tuple[float, float]:
    """The times (seconds) of the clip's first and last frames at `fps`; ValueError without a
    frame rate (a clip of a timed record cannot then be labelled)."""
    if not fps > 0:
        raise ValueError(f"no frame rate ({fps}): cannot time the clip's frames")
    first, last = frame_span(clip.positions, modality)
    return first / fps, last / fps


def label_fields(
    label: int,
    label_set: LabelSet | None,
    *,
    num_classes: int,
    span_s: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The item's `"label"` (and `"targets"` when `label_set` is given) for a clip spanning
    `span_s` (None: the whole video)."""
    if label_set is None:
        return {"label": label}
    return {"label": NO_SINGLE_LABEL, "targets": multi_hot(label_set.for_clip(span_s), num_classes)}


def collate_targets(
    items: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """`{"targets": float32 (N, K)}` of the batch's `rows` when the items are multi-label,
    else `{}` (a batch with no readable row has (0, K) targets)."""
    if not items or "targets" not in items[0]:
        return {}
    width = items[0]["targets"].shape[0]
    if not rows:
        return {"targets": torch.zeros((0, width), dtype=torch.float32)}
    return {"targets": torch.stack([it["targets"] for it in rows])}
