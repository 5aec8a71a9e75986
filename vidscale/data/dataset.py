"""Map-style dataset of clips decoded from video files.

An item is `{"clip": uint8 (C, T, H, W), "label": int, "index": int, "skipped": [...],
"readable": bool}`. Augmentation randomness comes from
`np.random.default_rng((seed, epoch, index, attempt))`, so a sample does not depend on which
worker produced it (exact resume). Each read failure goes into `skipped` as (path, reason) so the
run can report it. What happens next depends on the mode:

- training: the unreadable video is replaced by another, deterministically chosen, sample (a
  step needs a full batch, and an epoch's sample count must not depend on the data);
- evaluation: nothing is substituted. The item is marked `"readable": False` with `"clip": None`
  and the video's own label and index, so an evaluator can leave it out of every sum and name
  it; a substitute would be another video counted twice, with its own label, under this
  video's place in the count.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from vidscale.data.annotations import VideoRecord
from vidscale.data.decode import VideoMeta, decode_frames, probe
from vidscale.data.epoch_state import SharedInts
from vidscale.data.sampling import dense_indices, uniform_indices
from vidscale.data.transforms import eval_crops, train_transform

META_CACHE_SIZE = 16_384  # probed videos remembered per worker (a few KiB each)


@dataclass
class ClipSpec:
    """How a clip is sampled and transformed.

    `num_clips` x `num_crops` > 1 is multi-view testing: the item's clip is then
    (V, C, T, H, W) with V = num_clips * num_crops views (clip-major), for an evaluator that
    averages the views of each video. `max_stride` > `stride` makes dense training clips draw
    their stride uniformly from [stride, max_stride] (multigrid's long cycle: fewer frames
    cover the same time span, Wu et al. §3.2); 0 keeps `stride`.
    """

    frames: int = 8
    sampling: Literal["uniform", "dense"] = "uniform"
    stride: int = 8
    crop_size: int = 224
    short_side: int = 256
    scales: tuple[float, ...] = (1.0, 0.875, 0.75, 0.66)
    flip: bool = True
    num_clips: int = 1
    num_crops: int = 1
    max_stride: int = 0


def frame_indices(
    num_frames: int, spec: ClipSpec, *, rng: np.random.Generator | None, clip_index: int = 0
) -> np.ndarray:
    """The frames of one clip: random for training (`rng`), deterministic for evaluation."""
    if spec.sampling == "dense":
        stride = spec.stride
        if rng is not None and spec.max_stride > spec.stride:
            stride = int(rng.integers(spec.stride, spec.max_stride + 1))
        return dense_indices(
            num_frames,
            spec.frames,
            stride,
            rng=rng,
            clip_index=clip_index,
            num_clips=spec.num_clips,
        )
    if rng is None and spec.num_clips > 1:
        # Clip k of K takes the point (k + 1/2) / K of the way through each segment
        # (K = 1 is the segment centre, as `uniform_indices` gives).
        length = num_frames / spec.frames
        where = (clip_index + 0.5) / spec.num_clips
        points = length * (np.arange(spec.frames) + where)
        return np.minimum(np.floor(points), num_frames - 1).astype(np.int64)
    return uniform_indices(num_frames, spec.frames, rng=rng)


def make_clip(
    frames_THWC: np.ndarray, spec: ClipSpec, *, train: bool, rng: np.random.Generator
) -> list[torch.Tensor]:
    """Transformed views of decoded frames: one for training, `num_crops` for evaluation."""
    if train:
        return [
            train_transform(
                frames_THWC, size=spec.crop_size, scales=spec.scales, flip=spec.flip, rng=rng
            )
        ]
    return eval_crops(
        frames_THWC, short_side=spec.short_side, size=spec.crop_size, num_crops=spec.num_crops
    )


class VideoClipDataset(Dataset[dict[str, Any]]):
    """Clips of `records` sampled and transformed by `spec`.

    Item i is video i unless it cannot be read. Training (`train=True`): up to `max_retries`
    substitutes, each drawn deterministically from (seed, epoch, i, attempt), are tried, and
    every failure is reported in the item's `skipped` list as (path, reason). Evaluation
    (`train=False`): the item is `{"clip": None, "label": record i's label, "index": i,
    "skipped": [(path i, reason)], "readable": False}` (`max_retries` is not used); `collate`
    leaves such items out of the batch's rows. Every other item has `"readable": True`. Each
    worker remembers probed videos (so an item decodes its video once) and videos that failed
    (so they are not read again).
    """

    def __init__(
        self,
        records: Sequence[VideoRecord],
        spec: ClipSpec,
        *,
        train: bool,
        seed: int = 0,
        max_retries: int = 10,
    ) -> None:
        if not records:
            raise ValueError("no videos to read")
        self.records = list(records)
        self.spec = spec
        self.train = train
        self.seed = seed
        self.max_retries = max_retries
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
        current = index
        for attempt in range(self.max_retries + 1):
            rng = np.random.default_rng((self.seed, self.epoch, index, attempt))
            path = self.records[current].path
            try:
                if path in self._failed:
                    raise _KnownBad(self._failed[path])
                clip = self.load_views(current, rng, spec)
            except Exception as err:  # one unreadable video must not stop a long run
                reason = self._failed.setdefault(path, f"{type(err).__name__}: {err}")
                skipped.append((str(path), reason))
                if not self.train:
                    return {
                        "clip": None,
                        "label": self.records[index].label,
                        "index": index,
                        "skipped": skipped,
                        "readable": False,
                    }
                # Its own generator: the choice must not depend on how far the read got.
                pick = np.random.default_rng((self.seed, self.epoch, index, attempt, 1))
                current = self._substitute(current, pick)
                continue
            label = self.records[current].label
            return {
                "clip": clip,
                "label": label,
                "index": index,
                "skipped": skipped,
                "readable": True,
            }
        raise RuntimeError(
            f"item {index}: {self.max_retries + 1} videos in a row could not be read; "
            f"last: {skipped[-1][0]}: {skipped[-1][1]}"
        )

    def load_views(
        self, index: int, rng: np.random.Generator, spec: ClipSpec | None = None
    ) -> torch.Tensor:
        """Video `index` as (C, T, H, W), or (V, C, T, H, W) for multi-view evaluation, sampled
        by `spec` (default: the dataset's).

        The one place frames are read: a subclass reading another storage overrides it.
        """
        spec = spec or self.spec
        path = self.records[index].path
        meta = self._probe(path)
        views: list[torch.Tensor] = []
        for k in range(1 if self.train else spec.num_clips):
            idx = frame_indices(
                meta.num_frames, spec, rng=rng if self.train else None, clip_index=k
            )
            frames = decode_frames(path, idx, meta=meta)
            views.extend(make_clip(frames, spec, train=self.train, rng=rng))
        return views[0] if len(views) == 1 else torch.stack(views)

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

    `clip`: their clips stacked, (N, C, T, H, W) or (N, V, C, T, H, W) for multi-view items;
    an empty uint8 tensor of shape (0,) when no item is readable. `label`, `index`: int64 (N,)
    of the same rows. `skipped`: every item's read-failure reports, concatenated (training
    substitutions and unreadable evaluation videos alike). `unreadable`: the reports of the
    items left out, one (path, reason) per item (an unreadable item reports exactly itself),
    so `len(batch["unreadable"])` is how many listed videos the batch could not read. An item
    without a `"readable"` key counts as readable.
    """
    rows = [it for it in items if it.get("readable", True)]
    return {
        "clip": (
            torch.stack([it["clip"] for it in rows]) if rows else torch.empty(0, dtype=torch.uint8)
        ),
        "label": torch.tensor([it["label"] for it in rows], dtype=torch.long),
        "index": torch.tensor([it["index"] for it in rows], dtype=torch.long),
        "skipped": [s for it in items for s in it["skipped"]],
        "unreadable": [s for it in items if not it.get("readable", True) for s in it["skipped"]],
    }
