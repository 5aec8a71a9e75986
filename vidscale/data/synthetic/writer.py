"""Writing the demo generators' videos: H.264 encoding and a pool that renders and encodes many.

A job carries its own seed and a picklable render callable (a top-level function, or a
`functools.partial` of one), so a video's bytes depend on its job alone, not on the worker or
the order in which the pool runs the jobs.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import av
import numpy as np

# Fewer jobs than this run in this process: worker start-up would cost more than it saves.
POOL_MIN_JOBS = 64


class Renderer(Protocol):
    def __call__(self, *, rng: np.random.Generator) -> np.ndarray:
        """(T, H, W, 3) uint8 RGB frames, all randomness drawn from `rng`."""
        ...


@dataclass(frozen=True)
class VideoJob:
    """One video: `render` draws its frames from a generator seeded with `seed`; they are
    encoded to `path` at `fps`, with a keyframe at least every `gop` frames."""

    path: Path
    seed: np.random.SeedSequence
    render: Renderer
    fps: int
    gop: int


def check_video_shape(size: int, num_frames: int) -> None:
    """Raise ValueError unless `size` is even and >= 16 (H.264 4:2:0 halves both sides of the
    chroma planes) and there are at least 4 frames (the demos' motions need that many)."""
    if size % 2 or size < 16:
        raise ValueError(f"size must be even and >= 16 (H.264 4:2:0), got {size}")
    if num_frames < 4:
        raise ValueError(f"num_frames must be >= 4, got {num_frames}")


def encode_h264(frames: np.ndarray, path: Path, *, fps: int, gop: int, crf: int = 17) -> None:
    """Write (T, H, W, 3) uint8 RGB frames as an H.264 .mp4 (yuv420p, a keyframe at least every
    `gop` frames); the bytes are a pure function of the frames and settings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        # One thread, no lookahead and frames converted to 4:2:0 before the encoder: with
        # these, x264's output bytes are a pure function of the input frames.
        options = {
            "crf": str(crf),
            "threads": "1",
            "preset": "medium",
            "x264-params": "rc-lookahead=0:sync-lookahead=0",
        }
        stream = container.add_stream("libx264", rate=fps, options=options)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        stream.codec_context.thread_count = 1
        for rgb in frames:
            yuv = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            frame = av.VideoFrame.from_ndarray(yuv.to_ndarray().copy(), format="yuv420p")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def write_video(job: VideoJob) -> None:
    """Render `job`'s frames and encode them to `job.path`."""
    frames = job.render(rng=np.random.default_rng(job.seed))
    encode_h264(frames, job.path, fps=job.fps, gop=job.gop)


def write_videos(jobs: list[VideoJob], *, workers: int = 0) -> None:
    """Write every job's video, with `workers` forked processes when there are at least
    `POOL_MIN_JOBS` jobs (`workers=0` picks a count); the bytes do not depend on `workers`."""
    workers = workers or min(4, mp.cpu_count())
    if workers > 1 and len(jobs) >= POOL_MIN_JOBS:
        with mp.get_context("fork").Pool(workers) as pool:
            pool.map(write_video, jobs, chunksize=8)
    else:
        for job in jobs:
            write_video(job)
