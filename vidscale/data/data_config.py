"""The `data` section of a run: where the clips come from and how they are batched. Beside the
data package (like each component's config), so that the loaders take it without the run config."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from vidscale.data.clip import ClipSpec
from vidscale.data.layouts import check_layout_name, layout
from vidscale.data.layouts.generic import GENERIC
from vidscale.data.read_health import UnreadableLimit
from vidscale.data.sources import FlowSettings
from vidscale.data.transforms import IMAGENET_RGB_MEAN, IMAGENET_RGB_STD

ViewAggregate = Literal["mean", "max"]
VIEW_AGGREGATES: tuple[str, ...] = get_args(ViewAggregate)


@dataclass
class DataConfig:
    """Where the clips come from and how they are batched (per rank, per micro-batch).

    `multi_label`: the videos have label sets, not one class each (docs/design.md, "Multi-label
    data"): items carry `"targets"` (K,) multi-hot and `"label"` -1. It must agree with the
    layout (`data.layout=charades|multilabel` are multi-label, every other layout is not) when
    videos are read, and with the prepared index when shards are (checked as it is read).
    `eval_aggregate`: how an evaluation combines a video's views (`eval_clip.num_clips` x
    `num_crops`): the mean of their scores, or the maximum per class (PySlowFast's
    `ENSEMBLE_METHOD: max` for Charades).
    """

    root: str = ""
    # videos: decode the files listed by the layout; shards: a `vidscale prepare`d directory
    # read by random access; stream: the same, read shard by shard (slow random I/O).
    source: Literal["videos", "shards", "stream"] = "videos"
    # a name registered in `vidscale.data.layouts` (checked by `validate`)
    layout: str = GENERIC
    split: int = 1  # UCF101 / HMDB51 split
    train_list: str = "train.csv"
    val_list: str = "val.csv"
    classes: str = "classes.txt"
    batch_size: int = 8
    eval_batch_size: int = 0  # 0: same as batch_size
    workers: int = 4
    # how loader workers start: auto (the platform's default: fork on Linux), fork, forkserver
    # or spawn (a clean process: no state copied from a parent that runs threads)
    worker_start: Literal["auto", "fork", "forkserver", "spawn"] = "auto"
    skip_missing: bool = False
    # Training stops (one line, `UnreadableData`) once more than this share of a process's
    # last `unreadable_window` reads failed, after `unreadable_min_reads` reads: a few
    # damaged files are replaced by others, a mostly unreadable dataset is not trained on.
    max_unreadable_share: float = 0.5
    unreadable_window: int = 64
    unreadable_min_reads: int = 32
    # source=stream: clips held for shuffling, and how many before the first is yielded
    shuffle_buffer: int = 256
    shuffle_initial: int = 32
    train_clip: ClipSpec = field(default_factory=ClipSpec)
    eval_clip: ClipSpec = field(default_factory=lambda: ClipSpec(flip=False))
    # modality=flow: how optical flow is computed from raw videos (data.source=videos, predict);
    # prepared flow brings its own settings, which the run records here
    flow: FlowSettings = field(default_factory=FlowSettings)
    multi_label: bool = False
    eval_aggregate: ViewAggregate = "mean"
    # RGB normalisation, (x / 255 - mean) / std per channel, 0..1 scale, RGB order (frames are
    # decoded RGB). ImageNet's by default (MMAction2, the TSM code); the PyTorchVideo and
    # PySlowFast models were trained with 0.45 / 0.225, which their imports record. Flow input
    # has its own (`transforms.input_normalization`) and ignores these.
    mean: tuple[float, float, float] = IMAGENET_RGB_MEAN
    std: tuple[float, float, float] = IMAGENET_RGB_STD

    def validate(self) -> None:
        """ValueError naming the field for an unknown layout, a `mean`/`std` that is not 3
        positive finite numbers, a `multi_label` the layout contradicts (videos read through
        it), or an unknown `eval_aggregate`."""
        check_layout_name(self.layout)
        self._check_normalization()
        if self.eval_aggregate not in VIEW_AGGREGATES:
            raise ValueError(
                f"data.eval_aggregate must be one of {list(VIEW_AGGREGATES)}, "
                f"got {self.eval_aggregate!r}"
            )
        sets = layout(self.layout).multi_label
        if self.source == "videos" and self.multi_label != sets:
            has = "label sets" if sets else "one label a video"
            raise ValueError(
                f"data.multi_label={str(self.multi_label).lower()} but data.layout="
                f"{self.layout} has {has}: set data.multi_label={str(sets).lower()}"
            )

    def _check_normalization(self) -> None:
        for name in ("mean", "std"):
            values = getattr(self, name)
            if len(values) != 3 or not all(math.isfinite(v) and v > 0 for v in values):
                raise ValueError(
                    f"data.{name} must be 3 positive finite numbers (R, G, B on the 0..1 "
                    f"scale), got {list(values)}"
                )

    def unreadable_limit(self) -> UnreadableLimit:
        """The rule that stops training on a mostly unreadable dataset (`data.read_health`)."""
        return UnreadableLimit(
            self.max_unreadable_share, self.unreadable_window, self.unreadable_min_reads
        )
