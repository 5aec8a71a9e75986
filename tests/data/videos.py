"""Small real video files for the data tests, written with PyAV."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from vidscale.data.synthetic.writer import encode_h264


def numbered_frames(n: int, *, size: int = 32) -> np.ndarray:
    """Frames whose brightness encodes their index (robust to lossy coding)."""
    frames = np.zeros((n, size, size, 3), dtype=np.uint8)
    for i in range(n):
        frames[i] = (i * 255) // max(n - 1, 1)
    return frames


def textured_frames(n: int, *, size: int = 32, seed: int = 0) -> np.ndarray:
    """Frames with a moving texture, so every frame differs from its neighbours in detail
    (P and B frames carry real residuals, unlike flat frames)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(size, 2 * size, 3), dtype=np.uint8)
    return np.stack([np.roll(base, i, axis=1)[:, :size] for i in range(n)])


def write_video(path: Path, n: int, *, gop: int = 8, size: int = 32) -> Path:
    encode_h264(numbered_frames(n, size=size), path, fps=15, gop=gop)
    return path


def write_with_muxer(
    path: Path,
    frames: np.ndarray,
    *,
    gop: int,
    format: str | None = None,
    options: dict[str, str] | None = None,
) -> Path:
    """H.264 frames in any container PyAV writes (`format`: e.g. "h264" for a raw Annex B
    stream without timestamps; `options`: muxer options such as movflags=faststart)."""
    with av.open(str(path), mode="w", format=format, options=options or {}) as container:
        stream = container.add_stream("libx264", rate=15, options={"threads": "1"})
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        for rgb in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
