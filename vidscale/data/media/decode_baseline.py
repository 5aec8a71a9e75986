"""The keyframe-seeking decoder that `decode.decode_frames` replaced, kept as the baseline of
`vidscale bench data` (`h264_seek`) so one run measures the gain of decoding by segments.

For each wanted frame, in ascending order, it keeps decoding forward when the frame's GOP
starts at or before what has been decoded already, and otherwise seeks to that GOP's keyframe.
Every frame from the keyframe to the wanted one is decoded and wrapped in a Python frame, and
wanted frames are converted with `VideoFrame.to_ndarray`. The frames equal `decode_frames`'s;
only the work differs. Seekable files only (a `VideoMeta` with timestamps).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vidscale.data.media.decode import (
    _READ_ERRORS,
    DecodeError,
    DecodeStats,
    VideoMeta,
    open_video,
)


def decode_frames_seek(
    path: Path,
    indices: Sequence[int] | np.ndarray,
    *,
    meta: VideoMeta,
    stats: DecodeStats | None = None,
) -> np.ndarray:
    """Frames at `indices` (any order, repeats allowed) as (T, H, W, 3) uint8 RGB."""
    if not meta.seekable:
        raise ValueError("the baseline decoder needs a seekable video (packet timestamps)")
    wanted_order = np.asarray(indices, dtype=np.int64).reshape(-1)
    wanted = [int(i) for i in np.unique(wanted_order)]
    stats = stats if stats is not None else DecodeStats()
    with open_video(path) as (container, stream):
        try:
            got = _decode_with_seeks(_Cursor(container, stream, meta, stats), wanted)
        except _READ_ERRORS as err:
            raise DecodeError(f"decoding failed: {err}") from err
    missing = [i for i in wanted if i not in got]
    if missing:
        raise DecodeError(f"frames {missing[:5]} of {meta.num_frames} could not be decoded")
    return np.stack([got[int(i)] for i in wanted_order])


class _Cursor:
    """A decoder positioned somewhere in the stream, with the index of the last frame it gave."""

    def __init__(self, container: Any, stream: Any, meta: VideoMeta, stats: DecodeStats) -> None:
        self.container = container
        self.stream = stream
        self.meta = meta
        self.stats = stats
        self.frames: Iterator[Any] = iter(())
        self.position = -1  # no frame decoded since the last seek

    def seek(self, frame_index: int) -> None:
        pts = int(self.meta.pts[frame_index])
        self.container.seek(pts, stream=self.stream, backward=True, any_frame=False)
        self.frames = self.container.decode(self.stream)
        self.position = -1
        self.stats.seeks += 1

    def next_frame(self) -> tuple[int, Any] | None:
        frame = next(self.frames, None)
        if frame is None:
            return None
        self.stats.frames_decoded += 1
        self.position = self._index_of(frame)
        return self.position, frame

    def _index_of(self, frame: Any) -> int:
        if frame.pts is not None:
            i = int(np.searchsorted(self.meta.pts, frame.pts))
            if i < len(self.meta.pts) and self.meta.pts[i] == frame.pts:
                return i
        return self.position + 1


def _to_rgb(frame: Any) -> np.ndarray:
    rgb: np.ndarray = frame.to_ndarray(format="rgb24")
    quarter_turns = round(frame.rotation / 90) % 4
    return np.ascontiguousarray(np.rot90(rgb, quarter_turns)) if quarter_turns else rgb


def _decode_with_seeks(cursor: _Cursor, wanted: list[int]) -> dict[int, np.ndarray]:
    got: dict[int, np.ndarray] = {}
    want = set(wanted)
    keyframes = cursor.meta.keyframes
    started = False
    for target in wanted:
        if target in got:
            continue
        key = int(keyframes[np.searchsorted(keyframes, target, side="right") - 1])
        if not started or key > cursor.position + 1:  # a seek that skips frames
            cursor.seek(key)
            started = True
            if not _advance_to(cursor, target, want, got):
                cursor.seek(0)  # landed after the target (a bad index): from the start
                _advance_to(cursor, target, want, got)
        else:
            _advance_to(cursor, target, want, got)
    return got


def _advance_to(cursor: _Cursor, target: int, want: set[int], got: dict[int, np.ndarray]) -> bool:
    first = cursor.position == -1
    while True:
        step = cursor.next_frame()
        if step is None:
            return True
        index, frame = step
        if first and index > target:
            return False
        first = False
        if index in want and index not in got:
            got[index] = _to_rgb(frame)
        if index >= target:
            return True
