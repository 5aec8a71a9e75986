"""Decoding frames from video files with PyAV, decoding only what the sampled frames need.

Cost is set by how many frames are decoded (DESIGN §4), so `decode_frames` plans its work from
the stream's packet index (`probe`): frame i is the packet with the i-th smallest presentation
timestamp, and each frame belongs to the keyframe that starts its group of pictures (GOP). For
each wanted frame, in ascending order, it keeps decoding forward when the frame's GOP starts at or
before what has been decoded already, and otherwise seeks to that GOP's keyframe: a seek happens
exactly when it skips frames, so sparse TSN samples on a long-GOP file cost one GOP each, while
dense clips cost one seek. Every failure is a `DecodeError` with the reason, so the loader can
skip the video and report it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np

# What PyAV/FFmpeg raise for unreadable input; all of it becomes DecodeError.
_READ_ERRORS = (av.error.FFmpegError, OSError, ValueError, EOFError, UnicodeDecodeError)


class DecodeError(RuntimeError):
    """A video that cannot be read; the message says why."""


@dataclass(frozen=True, eq=False)
class VideoMeta:
    """What `probe` learns without decoding: `pts`, the presentation timestamps in frame order,
    and `keyframes`, the indices of frames that start a GOP (ascending, from 0). Without
    timestamps in the container `pts` is empty (not `seekable`) and `decode_frames` decodes
    sequentially from the start."""

    num_frames: int
    fps: float
    width: int
    height: int
    duration: float  # seconds
    pts: np.ndarray = field(repr=False)
    keyframes: np.ndarray = field(repr=False)

    @property
    def seekable(self) -> bool:
        return len(self.pts) == self.num_frames > 0


@dataclass
class DecodeStats:
    """Work done by `decode_frames` calls (for benchmarks and tests): frames decoded, seeks."""

    frames_decoded: int = 0
    seeks: int = 0


@contextmanager
def open_video(path: Path) -> Iterator[tuple[Any, Any]]:
    """Open `path` and yield (container, first video stream); errors become DecodeError."""
    path = Path(path)
    if not path.is_file():
        raise DecodeError(f"file not found: {path}")
    if path.stat().st_size == 0:
        raise DecodeError("zero-byte file")
    try:
        container = av.open(str(path), metadata_errors="ignore")
    except _READ_ERRORS as err:
        raise DecodeError(f"not a readable video: {err}") from err
    try:
        if not container.streams.video:
            raise DecodeError("no video stream")
        stream = container.streams.video[0]
        # One thread per decode: data-loader workers already run one video each in parallel,
        # and frame threading would delay output by several frames after every seek.
        stream.thread_type = "SLICE"
        stream.codec_context.thread_count = 1
        yield container, stream
    finally:
        container.close()


def probe(path: Path) -> VideoMeta:
    """Frame count, fps, size and the packet index of `path`.

    The count comes from the packets themselves (one per video frame), not from container
    metadata, which is often missing or wrong (`stream.frames` is 0 in Matroska/WebM); without
    packet timestamps the frames are counted by decoding.
    """
    with open_video(path) as (container, stream):
        try:
            pts, key_pts, untimed = _read_packet_index(container, stream)
        except _READ_ERRORS as err:
            raise DecodeError(f"cannot read packets: {err}") from err
        count = _count_by_decoding(path) if untimed else len(pts)
        if count == 0:
            raise DecodeError("video stream has no frames")
        pts_arr = np.sort(np.asarray(pts, dtype=np.int64))
        keys = np.unique(np.searchsorted(pts_arr, np.asarray(key_pts, dtype=np.int64)))
        if len(keys) == 0 or keys[0] != 0:
            keys = np.concatenate([[0], keys])  # decoding from the first packet always works
        time_base = float(stream.time_base) if stream.time_base else 0.0
        fps = _frame_rate(stream, pts_arr, time_base)
        return VideoMeta(
            num_frames=count,
            fps=fps,
            width=int(stream.codec_context.width),
            height=int(stream.codec_context.height),
            duration=_duration(stream, container, pts_arr, time_base, fps, count),
            pts=pts_arr,
            keyframes=keys.astype(np.int64),
        )


def _count_by_decoding(path: Path) -> int:
    """Frames of a stream without timestamps (a raw elementary stream cannot even seek back)."""
    with open_video(path) as (container, stream):
        try:
            return sum(1 for _ in container.decode(stream))
        except _READ_ERRORS as err:
            raise DecodeError(f"decoding failed while counting frames: {err}") from err


def _read_packet_index(container: Any, stream: Any) -> tuple[list[int], list[int], bool]:
    """(pts of every frame packet, pts of keyframe packets, whether some packet had no pts)."""
    pts: list[int] = []
    key_pts: list[int] = []
    for packet in container.demux(stream):
        if packet.size == 0 or packet.is_discard:
            # End-of-stream marker, or a frame an edit list cuts (the decoder drops it).
            continue
        if packet.pts is None:
            return [], [], True
        pts.append(packet.pts)
        if packet.is_keyframe:
            key_pts.append(packet.pts)
    return pts, key_pts, False


def _frame_rate(stream: Any, pts: np.ndarray, time_base: float) -> float:
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    if rate:
        return float(rate)
    if len(pts) > 1 and time_base and pts[-1] > pts[0]:
        return (len(pts) - 1) / (float(pts[-1] - pts[0]) * time_base)
    return 0.0


def _duration(
    stream: Any, container: Any, pts: np.ndarray, time_base: float, fps: float, count: int
) -> float:
    if stream.duration and time_base:
        return float(stream.duration * time_base)
    if len(pts) > 1 and time_base:
        return float(pts[-1] - pts[0]) * time_base + (1.0 / fps if fps else 0.0)
    if container.duration:
        return container.duration / av.time_base
    return count / fps if fps else 0.0


def decode_frames(
    path: Path,
    indices: Sequence[int] | np.ndarray,
    *,
    meta: VideoMeta | None = None,
    stats: DecodeStats | None = None,
) -> np.ndarray:
    """Frames at the 0-based `indices` (any order, repeats allowed) as (T, H, W, 3) uint8 RGB,
    in the order requested.

    `meta` (from `probe`) saves re-reading the packet index when the caller cached it; `stats`
    accumulates the work done. An index at or past the frame count, or a frame the file fails to
    deliver, is a `DecodeError`.
    """
    wanted_order = np.asarray(indices, dtype=np.int64).reshape(-1)
    if wanted_order.size == 0:
        raise ValueError("no frame indices requested")
    if wanted_order.min() < 0:
        raise ValueError(f"negative frame index {int(wanted_order.min())}")
    meta = meta or probe(path)
    if wanted_order.max() >= meta.num_frames:
        raise DecodeError(
            f"frame {int(wanted_order.max())} requested, video has {meta.num_frames} frames"
        )
    wanted = [int(i) for i in np.unique(wanted_order)]
    stats = stats if stats is not None else DecodeStats()
    with open_video(path) as (container, stream):
        try:
            if meta.seekable:
                got = _decode_with_seeks(_Cursor(container, stream, meta, stats), wanted)
            else:
                got = _decode_sequential(container, stream, wanted, stats)
        except _READ_ERRORS as err:
            raise DecodeError(f"decoding failed: {err}") from err
    missing = [i for i in wanted if i not in got]
    if missing:
        raise DecodeError(
            f"frames {missing[:5]} of {meta.num_frames} could not be decoded (truncated file?)"
        )
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
        # backward=True, any_frame=False: land on the last keyframe at or before the timestamp.
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
        """The frame's index from its pts (exact lookup in the packet index; else the next)."""
        if frame.pts is not None:
            i = int(np.searchsorted(self.meta.pts, frame.pts))
            if i < len(self.meta.pts) and self.meta.pts[i] == frame.pts:
                return i
        return self.position + 1


def _to_rgb(frame: Any) -> np.ndarray:
    """The frame as (H, W, 3) uint8 RGB, as displayed: phone videos are often coded sideways
    with a display-matrix rotation, which players apply and so must we (quarter turns only)."""
    rgb: np.ndarray = frame.to_ndarray(format="rgb24")
    quarter_turns = round(frame.rotation / 90) % 4  # counter-clockwise, as np.rot90 turns
    return np.ascontiguousarray(np.rot90(rgb, quarter_turns)) if quarter_turns else rgb


def _decode_with_seeks(cursor: _Cursor, wanted: list[int]) -> dict[int, np.ndarray]:
    """Decode the ascending `wanted` frames, seeking only past whole unneeded GOPs."""
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
                # The demuxer landed after the target (a bad index): decode from the start.
                cursor.seek(0)
                _advance_to(cursor, target, want, got)
        else:
            _advance_to(cursor, target, want, got)
    return got


def _advance_to(cursor: _Cursor, target: int, want: set[int], got: dict[int, np.ndarray]) -> bool:
    """Decode until frame `target` has gone by, keeping wanted frames. False when the first frame
    after a seek is already past the target (it cannot be reached from here)."""
    first = cursor.position == -1
    while True:
        step = cursor.next_frame()
        if step is None:
            return True  # end of stream; a frame still missing is reported by the caller
        index, frame = step
        if first and index > target:
            return False
        first = False
        if index in want and index not in got:
            got[index] = _to_rgb(frame)
        if index >= target:
            return True


def _decode_sequential(
    container: Any, stream: Any, wanted: list[int], stats: DecodeStats
) -> dict[int, np.ndarray]:
    """Frames by decode count from the start (containers without timestamps)."""
    got: dict[int, np.ndarray] = {}
    want = set(wanted)
    last = wanted[-1]
    for index, frame in enumerate(container.decode(stream)):
        stats.frames_decoded += 1
        if index in want:
            got[index] = _to_rgb(frame)
        if index >= last:
            break
    return got


def decode_all(path: Path, *, every: int = 1) -> Iterator[np.ndarray]:
    """Every `every`-th frame in order, decoding sequentially (one pass over a whole video)."""
    with open_video(path) as (container, stream):
        # No seeking here, so frame threading is safe and faster.
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = 0
        try:
            for i, frame in enumerate(container.decode(stream)):
                if i % every == 0:
                    yield _to_rgb(frame)
        except _READ_ERRORS as err:
            raise DecodeError(f"decoding failed: {err}") from err
