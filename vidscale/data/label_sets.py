"""Multi-label targets: a video's label set, its timed action segments, and a clip's labels.

A multi-label video (Charades, the multi-label demo) has a set of positive classes, possibly
empty, instead of one class. Where the annotation times its actions (Charades), the set is the
union of the segments' classes, and a training clip's positives are only the actions that
overlap the clip (`labels_for_clip`). This module knows nothing of files or pixels: the layouts
build `LabelSet`s, the datasets turn them into the items' `"targets"` (`data.targets`), and the
prepared index stores them (`to_json` / `from_json`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: The `label` of a multi-label record or item: it has no single class. Cross-entropy with it
#: fails loudly (an out-of-range target), so a single-label loss cannot train on it by mistake.
NO_SINGLE_LABEL = -1


@dataclass(frozen=True)
class ActionSegment:
    """One annotated action: class index, start and end in seconds (start <= end)."""

    label: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class LabelSet:
    """A multi-label video's positive classes; `segments` time them (empty: untimed, every
    clip of the video has all of `labels`). An empty `labels` is a video with no action."""

    labels: frozenset[int]
    segments: tuple[ActionSegment, ...] = ()

    def for_clip(self, span_s: tuple[float, float] | None) -> frozenset[int]:
        """The positives of a clip whose first and last frames are at `span_s` (seconds): the
        overlapping actions when the set is timed and a span is given, else the whole set."""
        if span_s is None or not self.segments:
            return self.labels
        return labels_for_clip(self.segments, *span_s)

    def to_json(self) -> dict[str, Any]:
        """The index fields of this set: `labels` (sorted) and, when timed, `segments`."""
        fields: dict[str, Any] = {"labels": sorted(self.labels)}
        if self.segments:
            fields["segments"] = [[s.label, s.start_s, s.end_s] for s in self.segments]
        return fields

    @staticmethod
    def from_json(obj: dict[str, Any]) -> LabelSet | None:
        """The set stored by `to_json` in an index entry; None for an entry without `labels`
        (a single-label entry, or an index written before label sets were stored)."""
        if "labels" not in obj:
            return None
        segments = tuple(
            ActionSegment(int(label), float(start), float(end))
            for label, start, end in obj.get("segments", ())
        )
        return LabelSet(frozenset(int(c) for c in obj["labels"]), segments)


def labels_for_clip(
    segments: Iterable[ActionSegment], clip_start_s: float, clip_end_s: float
) -> frozenset[int]:
    """The classes of the actions that overlap [clip_start_s, clip_end_s], the times of a clip's
    first and last sampled frames: PySlowFast's rule (every frame between the first and the last
    sampled one contributes its labels), in seconds instead of frames.

    Both intervals are closed: an action that ends at the clip's first frame, or starts at its
    last, counts (a frame at that instant lies inside both). Raises ValueError if the clip ends
    before it starts.
    """
    if clip_end_s < clip_start_s:
        raise ValueError(f"clip ends ({clip_end_s} s) before it starts ({clip_start_s} s)")
    return frozenset(
        s.label for s in segments if s.start_s <= clip_end_s and s.end_s >= clip_start_s
    )
