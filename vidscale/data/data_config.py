"""The `data` section of a run: where the clips come from and how they are batched. Beside the
data package (like each component's config), so that the loaders take it without the run config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vidscale.data.clip import ClipSpec
from vidscale.data.layouts.generic import GENERIC
from vidscale.data.read_health import UnreadableLimit
from vidscale.data.sources import FlowSettings


@dataclass
class DataConfig:
    """Where the clips come from and how they are batched (per rank, per micro-batch)."""

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

    def unreadable_limit(self) -> UnreadableLimit:
        """The rule that stops training on a mostly unreadable dataset (`data.read_health`)."""
        return UnreadableLimit(
            self.max_unreadable_share, self.unreadable_window, self.unreadable_min_reads
        )
