"""Which frames make a clip: pure functions of the frame count and a random generator.

- `uniform_indices`: TSN segment sampling (Wang et al.; the TSM code's default) — T equal
  segments, a random frame in each for training, the segment centre for evaluation.
- `dense_indices`: T consecutive frames at stride s (I3D-style), from a random start for
  training, or clip k of K spread evenly over the video for multi-clip testing.
"""

from __future__ import annotations

import numpy as np


def uniform_indices(
    num_frames: int, num_segments: int, *, rng: np.random.Generator | None
) -> np.ndarray:
    """T frame indices, one per segment; `rng=None` selects segment centres (evaluation)."""
    if num_frames < 1 or num_segments < 1:
        raise ValueError(f"need frames >= 1 and segments >= 1, got {num_frames}, {num_segments}")
    if num_frames < num_segments:
        # Fewer frames than segments: repeat frames, keeping temporal order.
        return (np.arange(num_segments) * num_frames // num_segments).astype(np.int64)
    length = num_frames / num_segments
    starts = np.floor(np.arange(num_segments) * length).astype(np.int64)
    ends = np.floor((np.arange(num_segments) + 1) * length).astype(np.int64)
    if rng is None:  # the TSM code's test-time offsets: int(length / 2 + length * k)
        return (length / 2 + length * np.arange(num_segments)).astype(np.int64)
    return starts + (rng.random(num_segments) * (ends - starts)).astype(np.int64)


def dense_indices(
    num_frames: int,
    num_out: int,
    stride: int,
    *,
    rng: np.random.Generator | None,
    clip_index: int = 0,
    num_clips: int = 1,
) -> np.ndarray:
    """`num_out` frames at `stride`; past the end the last frame repeats."""
    if num_frames < 1 or num_out < 1 or stride < 1:
        raise ValueError("need num_frames, num_out and stride >= 1")
    span = (num_out - 1) * stride + 1
    room = max(num_frames - span, 0)
    if rng is not None:
        start = int(rng.integers(0, room + 1))
    elif num_clips == 1:
        start = room // 2
    else:
        start = round(clip_index * room / (num_clips - 1))
    return np.minimum(start + np.arange(num_out) * stride, num_frames - 1).astype(np.int64)
