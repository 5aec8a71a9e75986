"""Decoding frames from video files with PyAV, decoding only what the sampled frames need.

Cost is set by how many frames are decoded (DESIGN §4), so `decode_frames` orders its work by
the stream's packet index (`probe`): frame i is the packet with the i-th smallest presentation
timestamp, and each frame belongs to the keyframe that starts its group of pictures (GOP). The
segments (`decode_segments`) enter each GOP that holds a wanted frame once, at its keyframe, send packets
until the last wanted frame of that GOP and stops there; inside it, pictures that are neither
wanted nor references are skipped by the decoder (H.264, MPEG-1/2/4 part 2), and only wanted
frames are converted to RGB. Sparse TSN samples on a long-GOP file thus cost the reference
pictures up to each sample, dense clips one seek. The frames are bit-identical to a full
sequential decode. Every failure is a `DecodeError` with the reason, so the loader can skip the
video and report it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from vidscale.data.media.decode_segments import SegmentDecoder, segments_for
from vidscale.data.media.video_meta import DecodeStats, VideoMeta

# What PyAV/FFmpeg raise for unreadable input; all of it becomes DecodeError.
_READ_ERRORS = (av.error.FFmpegError, OSError, ValueError, EOFError, UnicodeDecodeError)


class DecodeError(RuntimeError):
    """A video that cannot be read; the message says why."""


def decode_threads() -> int:
    """Decoder threads when the caller does not say: 1 inside a PyTorch `DataLoader` worker
    (the workers already decode one video each, a core apiece), otherwise up to 4 of the cores
    this process may run on (`predict`, a loader without workers)."""
    data = sys.modules.get("torch.utils.data")  # never imports torch
    if data is not None and data.get_worker_info() is not None:
        return 1
    return max(1, min(4, usable_cpus()))


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask where the OS has one (what a
    scheduler that binds tasks, SLURM's task/affinity or cgroups, gave it), else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@contextmanager
def open_video(
    path: Path, *, threads: int = 1, probe_codec: bool = True
) -> Iterator[tuple[Any, Any]]:
    """Open `path` and yield (container, first video stream); errors become DecodeError.

    `threads` > 1 decodes with FFmpeg's frame and slice threads (output lags input by up to
    `threads` frames; draining the decoder returns all of them), 0 with one thread per core.
    `probe_codec=False` skips the frames FFmpeg decodes while opening to learn what the
    container does not say (pixel format, reordering delay): CPU time wasted when the caller
    takes what it needs from a cached `VideoMeta` and decodes anyway (what opening costs:
    docs/benchmarks.md, "Raw video: the decoding plan vs keyframe-aware seeking").
    """
    path = Path(path)
    if not path.is_file():
        raise DecodeError(f"file not found: {path}")
    if path.stat().st_size == 0:
        raise DecodeError("zero-byte file")
    # Options of the decoders that stream probing opens (the decoder of the frames is another).
    options = None if probe_codec else {"skip_frame": "all"}
    try:
        container = av.open(str(path), metadata_errors="ignore", options=options)
    except _READ_ERRORS as err:
        raise DecodeError(f"not a readable video: {err}") from err
    try:
        if not container.streams.video:
            raise DecodeError("no video stream")
        stream = container.streams.video[0]
        # One thread by default: data-loader workers already run one video each in parallel.
        stream.thread_type = "SLICE" if threads == 1 else "AUTO"
        stream.codec_context.thread_count = threads
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
            index = _read_packet_index(container, stream)
        except _READ_ERRORS as err:
            raise DecodeError(f"cannot read packets: {err}") from err
        count = _count_by_decoding(path) if index.untimed else len(index.pts)
        if count == 0:
            raise DecodeError("video stream has no frames")
        pts_arr = np.sort(np.asarray(index.pts, dtype=np.int64))
        key_frames = np.searchsorted(pts_arr, np.asarray(index.key_pts, dtype=np.int64))
        keys, first = np.unique(key_frames, return_index=True)
        key_dts = np.asarray(index.key_dts, dtype=np.int64)[first]
        if len(keys) == 0 or keys[0] != 0:
            # Decoding from the first packet always works.
            keys = np.concatenate([[0], keys])
            key_dts = np.concatenate([[index.first_dts], key_dts])
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
            key_dts=key_dts.astype(np.int64),
            reorder_depth=int(getattr(stream.codec_context, "reorder_depth", 0)),
        )


def _count_by_decoding(path: Path) -> int:
    """Frames of a stream without timestamps (a raw elementary stream cannot even seek back)."""
    with open_video(path) as (container, stream):
        try:
            return sum(1 for _ in container.decode(stream))
        except _READ_ERRORS as err:
            raise DecodeError(f"decoding failed while counting frames: {err}") from err


@dataclass
class _PacketIndex:
    pts: list[int] = field(default_factory=list)  # of every frame packet, in decode order
    key_pts: list[int] = field(default_factory=list)  # of keyframe packets
    key_dts: list[int] = field(default_factory=list)  # of keyframe packets
    first_dts: int = 0  # of the first packet, the start of the stream
    untimed: bool = False  # some packet had no pts: nothing is indexed


def _read_packet_index(container: Any, stream: Any) -> _PacketIndex:
    index = _PacketIndex()
    first = True
    for packet in container.demux(stream):
        if packet.size == 0:  # end-of-stream marker
            continue
        if first:
            index.first_dts = _dts(packet)
            first = False
        if packet.is_discard:  # a frame an edit list cuts (the decoder drops it)
            continue
        if packet.pts is None:
            return _PacketIndex(untimed=True)
        index.pts.append(packet.pts)
        if packet.is_keyframe:
            index.key_pts.append(packet.pts)
            index.key_dts.append(_dts(packet))
    return index


def _dts(packet: Any) -> int:
    return int(packet.dts if packet.dts is not None else packet.pts or 0)


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
    threads: int | None = None,
) -> np.ndarray:
    """Frames at the 0-based `indices` (any order, repeats allowed) as (T, H, W, 3) uint8 RGB,
    in the order requested, bit-identical to the same frames of a full sequential decode.

    `meta` (from `probe`) saves re-reading the packet index when the caller cached it; `stats`
    accumulates the work done; `threads`: decoder threads (None: `decode_threads()`; the frames
    do not depend on it). An index at or past the frame count, or a frame the file fails to
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
    threads = decode_threads() if threads is None else threads
    # A seekable file needs nothing of FFmpeg's stream probing: the segments come from `meta`.
    with open_video(path, threads=threads, probe_codec=not meta.seekable) as (container, stream):
        try:
            if meta.seekable:
                runner = SegmentDecoder(container, stream, meta, stats, RGBConverter())
                got = runner.run(segments_for(meta.keyframes, wanted))
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


# PyAV 17 converts on a pool of threads (one per core) unless told otherwise, and
# `VideoFrame.to_ndarray` builds a new converter, and pool, for every frame.
_ONE_THREAD: dict[str, int] = {"threads": 1} if int(av.__version__.split(".")[0]) >= 17 else {}


class RGBConverter:
    """Decoded frames to (H, W, 3) uint8 RGB as displayed, through one swscale context on the
    caller's thread (building a context per frame costs more than converting with one:
    docs/benchmarks.md, "Numbers moved out of module docstrings"). Phone videos are often coded sideways with a display-matrix rotation,
    which players apply and so must we (quarter turns only). The pixels equal
    `frame.to_ndarray(format="rgb24")`, rotated."""

    def __init__(self) -> None:
        self._reformatter = VideoReformatter()

    def __call__(self, frame: Any) -> np.ndarray:
        rgb: np.ndarray = self._reformatter.reformat(
            frame, format="rgb24", **_ONE_THREAD
        ).to_ndarray()
        quarter_turns = round(frame.rotation / 90) % 4  # counter-clockwise, as np.rot90 turns
        return np.ascontiguousarray(np.rot90(rgb, quarter_turns)) if quarter_turns else rgb


def _decode_sequential(
    container: Any, stream: Any, wanted: list[int], stats: DecodeStats
) -> dict[int, np.ndarray]:
    """Frames by decode count from the start (containers without timestamps)."""
    got: dict[int, np.ndarray] = {}
    want = set(wanted)
    last = wanted[-1]
    to_rgb = RGBConverter()
    for index, frame in enumerate(container.decode(stream)):
        stats.frames_decoded += 1
        if index in want:
            got[index] = to_rgb(frame)
        if index >= last:
            break
    return got


def decode_all(path: Path, *, every: int = 1) -> Iterator[np.ndarray]:
    """Every `every`-th frame in order, decoding sequentially (one pass over a whole video)."""
    # No seeking here, so frame threading on every core is safe and faster.
    with open_video(path, threads=0) as (container, stream):
        to_rgb = RGBConverter()
        try:
            for i, frame in enumerate(container.decode(stream)):
                if i % every == 0:
                    yield to_rgb(frame)
        except _READ_ERRORS as err:
            raise DecodeError(f"decoding failed: {err}") from err
