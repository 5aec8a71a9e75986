"""Which frames make a clip: pure functions of the frame count and a random generator.

- `uniform_indices`: TSN segment sampling (Wang et al., TSN §3.2; the TSM code's default): T
  equal segments of [0, num_frames), a random frame in each for training, the segment centre for
  evaluation.
- `dense_indices`: T frames at stride s (I3D-style), from a random start for training, or clip k
  of K spread evenly over the video for multi-clip testing.

Indices are int64, ascending, and always inside [0, num_frames).
"""

from __future__ import annotations

import numpy as np


def uniform_indices(
    num_frames: int, num_segments: int, *, rng: np.random.Generator | None
) -> np.ndarray:
    """One frame index per segment; `rng=None` selects segment centres (evaluation).

    With L = num_frames / num_segments, segment k holds frames [floor(k L), floor((k + 1) L)):
    the segments tile the video and are disjoint, so no frame is drawn twice. Evaluation takes
    int(L / 2 + L k), the TSM code's test offsets. The TSM code's training segments instead have
    the integer length num_frames // T and never reach the tail of the video. A video shorter
    than T frames repeats its frames in order (frame floor(k n / T) for segment k, in training
    too), where the TSM code would return frame 0 T times.
    """
    if num_frames < 1 or num_segments < 1:
        raise ValueError(f"need frames >= 1 and segments >= 1, got {num_frames}, {num_segments}")
    k = np.arange(num_segments)
    if num_frames < num_segments:
        return (k * num_frames // num_segments).astype(np.int64)
    length = num_frames / num_segments
    if rng is None:
        return (length / 2 + length * k).astype(np.int64)
    starts = np.floor(k * length).astype(np.int64)
    ends = np.floor((k + 1) * length).astype(np.int64)
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
    """`num_out` frames `stride` apart, covering a span of (num_out - 1) * stride + 1 frames.

    Training (`rng`): a uniformly random start. Evaluation: clip k of K starts at k / (K - 1) of
    the free room (the TSM and SlowFast multi-clip test: first clip at the start, last at the end),
    or in the middle when K = 1. A video shorter than the span repeats its last frame.
    """
    if num_frames < 1 or num_out < 1 or stride < 1:
        raise ValueError(
            f"need num_frames, num_out and stride >= 1, got {num_frames}, {num_out}, {stride}"
        )
    if not 0 <= clip_index < num_clips:
        raise ValueError(f"clip_index {clip_index} outside [0, {num_clips})")
    span = (num_out - 1) * stride + 1
    room = max(num_frames - span, 0)
    if rng is not None:
        start = int(rng.integers(0, room + 1))
    elif num_clips == 1:
        start = room // 2
    else:
        start = round(clip_index * room / (num_clips - 1))
    return np.minimum(start + np.arange(num_out) * stride, num_frames - 1).astype(np.int64)
