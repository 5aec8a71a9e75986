"""What a video's stream index says before any frame is decoded (`VideoMeta`, from
`decode.probe`) and the work decoding did (`DecodeStats`): shared by the decoder (`decode`) and
the segment decoder (`decode_segments`), which depend on it and not on each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np


@dataclass(frozen=True, eq=False)
class VideoMeta:
    """What `probe` learns without decoding: `pts`, the presentation timestamps in frame order,
    and `keyframes`, the indices of frames that start a GOP (ascending, from 0). Without
    timestamps in the container `pts` is empty (not `seekable`) and `decode_frames` decodes
    sequentially from the start. `key_dts` holds the decode timestamps of the keyframes' packets
    (some containers, AVI for one, index keyframes by decode time), and `reorder_depth` the
    decoder's frame reordering delay as FFmpeg's stream probing found it (0: unknown or none)."""

    num_frames: int
    fps: float
    width: int
    height: int
    duration: float  # seconds
    pts: np.ndarray = field(repr=False)
    keyframes: np.ndarray = field(repr=False)
    key_dts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    reorder_depth: int = 0

    @property
    def seekable(self) -> bool:
        return len(self.pts) == self.num_frames > 0

    @cached_property
    def index_of_pts(self) -> dict[int, int]:
        """Frame index by pts (a dict lookup per packet and per decoded frame)."""
        return {int(p): i for i, p in enumerate(self.pts.tolist())}


@dataclass
class DecodeStats:
    """Work done by `decode_frames` calls (for benchmarks and tests): frames decoded, seeks."""

    frames_decoded: int = 0
    seeks: int = 0
