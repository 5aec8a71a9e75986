"""Map-style dataset of clips decoded from video files.

An item is `{"inputs": {modality: uint8 (C, T, H, W)}, "label": int, "index": int,
"skipped": [...], "readable": bool}`: its inputs are named by modality ("rgb", "flow"), so a
batch can carry one stream or two. Multi-label records add `"targets"`, the clip's multi-hot
positives, with `"label"` -1 (`data.targets`). Clips are sampled by `data.clip.sample_views` from a
`FrameSource` (`data.sources`): the dataset only says where pixels come from. Augmentation randomness comes from
`np.random.default_rng((seed, epoch, index, attempt))`, so a sample does not depend on which
worker produced it (exact resume). Each read failure goes into `skipped` as (path, reason) so the
run can report it. What happens next depends on the mode:

- training: the unreadable video is replaced by another, deterministically chosen, sample (a
  step needs a full batch, and an epoch's sample count must not depend on the data), until
  most recent reads fail (`data.read_health`): then `UnreadableData` stops the run;
- evaluation: nothing is substituted. The item is marked `"readable": False` with no inputs
  and the video's own label and index, so an evaluator can leave it out of every sum and name
  it; a substitute would be another video counted twice, with its own label, under this
  video's place in the count.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec, FrameSource, SampledClip, sample_clip
from vidscale.data.epoch_state import SharedInts
from vidscale.data.media.decode import VideoMeta, probe
from vidscale.data.read_health import ReadHealth, UnreadableLimit
from vidscale.data.sources import FlowSettings, file_source
from vidscale.data.targets import check_label_sets, clip_span_s, collate_targets, label_fields

META_CACHE_SIZE = 16_384  # probed videos remembered per worker (a few KiB each)


class VideoClipDataset(Dataset[dict[str, Any]]):
    """Clips of `records` sampled and transformed by `spec`.

    Item i is video i unless it cannot be read. Training (`train=True`): substitutes, each
    drawn deterministically from (seed, epoch, i, attempt), are tried until one reads, and
    every failure is reported in the item's `skipped` list as (path, reason); `UnreadableData`
    is raised instead once the failures break `unreadable` (default `UnreadableLimit()`) over
    this process's recent reads. Evaluation (`train=False`): the item is `{"inputs": {},
    "label": record i's label, "index": i, "skipped": [(path i, reason)], "readable": False}`
    (no substitute, no limit); `collate`
    leaves such items out of the batch's rows. Every other item has `"readable": True`. Each
    worker remembers probed videos (so an item decodes its video once) and videos that failed
    (so they are not read again). A flow spec computes optical flow from the frames with
    `flow` (default `FlowSettings()`). Multi-label records (`label_set` given) need
    `num_classes`, the width of their items' `"targets"`.
    """

    def __init__(
        self,
        records: Sequence[VideoRecord],
        spec: ClipSpec,
        *,
        train: bool,
        seed: int = 0,
        unreadable: UnreadableLimit | None = None,
        flow: FlowSettings | None = None,
        num_classes: int = 0,
    ) -> None:
        if not records:
            raise ValueError("no videos to read")
        self.records = list(records)
        self.num_classes = num_classes
        self.multi_label = check_label_sets([r.label_set for r in self.records], num_classes)
        self.spec = spec
        self.flow = flow or FlowSettings()
        self.train = train
        self.seed = seed
        self.health = ReadHealth(unreadable or UnreadableLimit())
        self._epoch = SharedInts(1)  # reaches persistent loader workers
        self._meta: OrderedDict[Path, VideoMeta] = OrderedDict()
        self._failed: dict[Path, str] = {}

    @property
    def epoch(self) -> int:
        return self._epoch[0]

    def set_epoch(self, epoch: int) -> None:
        self._epoch[0] = epoch

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, key: int | tuple[int, ClipSpec]) -> dict[str, Any]:
        """Item `key`: an index, or (index, spec) to sample this item with another clip shape
        (a multigrid batch request, `data.samplers.RequestBatchSampler`)."""
        index, spec = key if isinstance(key, tuple) else (key, self.spec)
        skipped: list[tuple[str, str]] = []
        current, attempt = index, 0
        while True:  # ends: a read succeeds, or `health` stops a run of failures
            rng = np.random.default_rng((self.seed, self.epoch, index, attempt))
            path = self.records[current].path
            try:
                if path in self._failed:
                    raise _KnownBad(self._failed[path])
                clip = self.load_clip(current, rng, spec)
                labels = self.labels(current, clip, spec)
            except Exception as err:  # one unreadable video must not stop a long run
                reason = self._failed.setdefault(path, f"{type(err).__name__}: {err}")
                skipped.append((str(path), reason))
                if self.train:
                    self.health.failed(str(path), reason)
                else:
                    return {
                        "inputs": {},
                        **self.labels(index, None, spec),
                        "index": index,
                        "skipped": skipped,
                        "readable": False,
                    }
                # Its own generator: the choice must not depend on how far the read got.
                pick = np.random.default_rng((self.seed, self.epoch, index, attempt, 1))
                current = self._substitute(current, pick)
                attempt += 1
                continue
            if self.train:
                self.health.read()
            return {
                "inputs": {spec.modality: clip.views},
                **labels,
                "index": index,
                "skipped": skipped,
                "readable": True,
            }

    def load_views(
        self, index: int, rng: np.random.Generator, spec: ClipSpec | None = None
    ) -> torch.Tensor:
        """Video `index` as (C, T, H, W), or (V, C, T, H, W) for multi-view evaluation, sampled
        by `spec` (default: the dataset's)."""
        return self.load_clip(index, rng, spec).views

    def load_clip(
        self, index: int, rng: np.random.Generator, spec: ClipSpec | None = None
    ) -> SampledClip:
        """`load_views` with the positions the clip read."""
        spec = spec or self.spec
        return sample_clip(self.source(index, spec), spec, train=self.train, rng=rng)

    def labels(self, index: int, clip: SampledClip | None, spec: ClipSpec) -> dict[str, Any]:
        """Record `index`'s label fields (`data.targets`) for `clip`: a training clip of a
        timed record is labelled by its time span, anything else by the whole video."""
        record = self.records[index]
        span = None
        timed = record.label_set is not None and bool(record.label_set.segments)
        if self.train and clip is not None and timed:
            span = clip_span_s(clip, self.frame_rate(index), spec.modality)
        return label_fields(
            record.label, record.label_set, num_classes=self.num_classes, span_s=span
        )

    def frame_rate(self, index: int) -> float:
        """Frames per second of record `index`'s positions (a subclass reading another storage
        overrides it)."""
        return self._probe(self.records[index].path).fps

    def source(self, index: int, spec: ClipSpec) -> FrameSource:
        """Where item `index`'s pixels come from: a subclass reading another storage
        overrides it."""
        return file_source(self.records[index].path, spec, self.flow, probe_video=self._probe)

    def _probe(self, path: Path) -> VideoMeta:
        meta = self._meta.get(path)
        if meta is None:
            meta = self._meta[path] = probe(path)
            if len(self._meta) > META_CACHE_SIZE:
                self._meta.popitem(last=False)
        else:
            self._meta.move_to_end(path)
        return meta

    def _substitute(self, current: int, rng: np.random.Generator) -> int:
        """Another index, uniformly among the rest, from the item's own generator."""
        if len(self.records) == 1:
            return current
        other = int(rng.integers(len(self.records) - 1))
        return other + 1 if other >= current else other


class _KnownBad(Exception):
    """A video this worker already failed to read (the message is the first reason)."""


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch whose rows are the readable items, in order.

    `inputs`: for each input name (modality) of the items, their clips stacked, (N, C, T, H, W)
    or (N, V, C, T, H, W) for multi-view items; `{}` when no item is readable. `label`, `index`: int64 (N,)
    of the same rows. `skipped`: every item's read-failure reports, concatenated (training
    substitutions and unreadable evaluation videos alike). `unreadable`: the reports of the
    items left out, one (path, reason) per item (an unreadable item reports exactly itself),
    so `len(batch["unreadable"])` is how many listed videos the batch could not read. An item
    without a `"readable"` key counts as readable. Multi-label items add `targets`: float32
    (N, K) of the same rows.
    """
    rows = [it for it in items if it.get("readable", True)]
    return {
        "inputs": {
            name: torch.stack([it["inputs"][name] for it in rows])
            for name in (rows[0]["inputs"] if rows else ())
        },
        "label": torch.tensor([it["label"] for it in rows], dtype=torch.long),
        "index": torch.tensor([it["index"] for it in rows], dtype=torch.long),
        "skipped": [s for it in items for s in it["skipped"]],
        "unreadable": [s for it in items if not it.get("readable", True) for s in it["skipped"]],
        **collate_targets(items, rows),
    }
