"""Decoding frames from video files with PyAV, decoding only what the sampled frames need.

Cost is set by how many frames are decoded (DESIGN §4), so `decode_frames` plans its work from
the stream's packet index: frame i is the i-th presentation timestamp, and each frame belongs to
the keyframe that starts its group of pictures. For each wanted frame it either keeps decoding
forward (when the wanted frame is in the group being decoded) or seeks to the frame's keyframe
(skipping whole groups). Every failure is a `DecodeError` with the reason, so the loader can
skip the video and report it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np


class DecodeError(RuntimeError):
    """A video that cannot be read; the message says why."""


@dataclass(frozen=True)
class VideoMeta:
    num_frames: int
    fps: float
    width: int
    height: int
    duration: float  # seconds
    pts: tuple[int, ...]  # presentation timestamps, frame order
    keyframes: tuple[int, ...]  # frame indices of keyframes, ascending


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
    except (av.error.FFmpegError, OSError, UnicodeDecodeError, ValueError) as err:
        raise DecodeError(f"not a readable video: {err}") from err
    try:
        if not container.streams.video:
            raise DecodeError("no video stream")
        yield container, container.streams.video[0]
    finally:
        container.close()


def _index_packets(container: Any, stream: Any) -> tuple[list[int], list[int]]:
    """Sorted presentation timestamps of all frames and the indices of keyframes (no decoding)."""
    pts: list[int] = []
    key_pts: list[int] = []
    for packet in container.demux(stream):
        if packet.pts is None or packet.size == 0:
            continue
        pts.append(packet.pts)
        if packet.is_keyframe:
            key_pts.append(packet.pts)
    pts.sort()
    position = {p: i for i, p in enumerate(pts)}
    keys = sorted({position[p] for p in key_pts if p in position})
    if pts and (not keys or keys[0] != 0):
        keys.insert(0, 0)  # decoding from the first packet always works
    return pts, keys


def probe(path: Path) -> VideoMeta:
    """Frame count (from the packet index, not container metadata), fps and size."""
    try:
        with open_video(path) as (container, stream):
            pts, keys = _index_packets(container, stream)
            if not pts:
                raise DecodeError("video stream has no frames")
            rate = stream.average_rate or stream.guessed_rate
            fps = float(rate) if rate else 0.0
            tb = float(stream.time_base) if stream.time_base else 0.0
            duration = (pts[-1] - pts[0]) * tb + (1.0 / fps if fps else 0.0)
            return VideoMeta(
                num_frames=len(pts),
                fps=fps,
                width=int(stream.codec_context.width),
                height=int(stream.codec_context.height),
                duration=duration,
                pts=tuple(pts),
                keyframes=tuple(keys),
            )
    except av.error.FFmpegError as err:
        raise DecodeError(f"cannot read packets: {err}") from err


def decode_frames(
    path: Path, indices: Sequence[int] | np.ndarray, *, meta: VideoMeta | None = None
) -> np.ndarray:
    """Frames at the 0-based `indices` (any order, repeats allowed) as (T, H, W, 3) uint8 RGB.

    `meta` (from `probe`) saves re-reading the packet index when the caller cached it.
    """
    if len(indices) == 0:
        raise ValueError("no frame indices requested")
    meta = meta or probe(path)
    wanted = sorted(set(int(i) for i in indices))
    if wanted[0] < 0 or wanted[-1] >= meta.num_frames:
        raise DecodeError(
            f"frame {wanted[-1] if wanted[-1] >= 0 else wanted[0]} requested, "
            f"video has {meta.num_frames} frames"
        )
    try:
        with open_video(path) as (container, stream):
            frames = _decode_planned(container, stream, wanted, meta)
    except av.error.FFmpegError as err:
        raise DecodeError(f"decoding failed: {err}") from err
    missing = [i for i in wanted if i not in frames]
    if missing:
        raise DecodeError(f"frames {missing[:5]} could not be decoded (truncated file?)")
    return np.stack([frames[int(i)] for i in indices])


def _decode_planned(
    container: Any, stream: Any, wanted: list[int], meta: VideoMeta
) -> dict[int, np.ndarray]:
    index_of = {p: i for i, p in enumerate(meta.pts)}
    want = frozenset(wanted)
    got: dict[int, np.ndarray] = {}
    position = -1  # index of the last decoded frame; -1: nothing decoded yet
    decoder: Iterator[Any] | None = None
    for target in wanted:
        if target in got:
            continue
        key = meta.keyframes[bisect.bisect_right(meta.keyframes, target) - 1]
        if decoder is None or key > position or target <= position:
            # The target's group starts after what we decoded: skip ahead by seeking.
            container.seek(meta.pts[key], stream=stream, backward=True, any_frame=False)
            decoder = container.decode(stream)
            position = key - 1
        for frame in decoder:
            idx = index_of.get(frame.pts, position + 1) if frame.pts is not None else position + 1
            position = idx
            if idx in want and idx not in got:
                got[idx] = frame.to_ndarray(format="rgb24")
            if idx >= target:
                break
    return got


def decode_all(path: Path, *, every: int = 1) -> Iterator[np.ndarray]:
    """Every `every`-th frame in order, decoding sequentially (for one-pass preparation)."""
    with open_video(path) as (container, stream):
        stream.thread_type = "AUTO"
        try:
            for i, frame in enumerate(container.decode(stream)):
                if i % every == 0:
                    yield frame.to_ndarray(format="rgb24")
        except av.error.FFmpegError as err:
            raise DecodeError(f"decoding failed: {err}") from err
