"""Small real video files for the data tests, written with PyAV."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vidscale.data.synthetic import encode_h264


def numbered_frames(n: int, *, size: int = 32) -> np.ndarray:
    """Frames whose brightness encodes their index (robust to lossy coding)."""
    frames = np.zeros((n, size, size, 3), dtype=np.uint8)
    for i in range(n):
        frames[i] = (i * 255) // max(n - 1, 1)
    return frames


def write_video(path: Path, n: int, *, gop: int = 8, size: int = 32) -> Path:
    encode_h264(numbered_frames(n, size=size), path, fps=15, gop=gop)
    return path
