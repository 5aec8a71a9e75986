"""The drawing parts both demo generators share (`synthetic.videos`, `synthetic.multilabel`).

Frames are drawn at `SUPERSAMPLE` times the output side on a float64 RGB canvas (values in
[0, 255]) and brought down to uint8 by `finish_frame`. Every part takes its randomness from the
generator it is given, in a fixed order, and reduces in a fixed order, so a video's bytes are a
pure function of its seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Where each shape carries its marker spot (object coordinates), well inside the shape.
MARKERS = {0: (0.0, -0.55), 1: (-0.6, -0.6), 2: (-0.6, -0.6), 3: (-0.55, -0.3)}
MARKER_RADIUS = 0.3
SUPERSAMPLE = 2  # render at 2x and average down: sub-pixel motion stays visible


def pixel_grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(gx, gy): the x and y of every pixel centre of an n x n canvas, each (n, n) float64."""
    gy, gx = np.mgrid[0:n, 0:n].astype(np.float64) + 0.5
    return gx, gy


def draw_background(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, n, 3) low-frequency colour blotches plus fine texture, moderately dark (the object
    stands out)."""
    coarse = rng.uniform(20, 110, size=(4, 4, 3))
    idx = np.linspace(0, 3, n)
    i0 = np.floor(idx).astype(int).clip(0, 2)
    f = (idx - i0)[:, None]
    rows = coarse[i0] * (1 - f[..., None]) + coarse[i0 + 1] * f[..., None]
    img = rows[:, i0] * (1 - f[None, :, :]) + rows[:, i0 + 1] * f[None, :, :]
    return img + rng.normal(0, 12, size=(n, n, 1))


def shape_mask(kind: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Shape `kind` (a key of `MARKERS`; none has rotational symmetry) at object coordinates
    (u, v), the shape spanning [-1, 1] on both."""
    inside = (np.abs(u) <= 1) & (np.abs(v) <= 1)
    if kind == 0:  # triangle
        return inside & (np.abs(u) <= (1 - v) / 2 + 0.05)
    if kind == 1:  # L shape
        return inside & ((u <= -0.2) | (v >= 0.3))
    if kind == 2:  # square with a notch
        return inside & ~((u > 0.1) & (v < -0.1))
    return inside & (u * u + v * v <= 1) & ~((u > 0.2) & (np.abs(v) < 0.35))  # notched disk


@dataclass(frozen=True)
class Blob:
    """A distractor: a disk moving in a straight line (bouncing off the borders), whatever the
    class."""

    pos: np.ndarray
    vel: np.ndarray
    radius: float
    colour: np.ndarray

    def centre(self, frame: int, n: int) -> np.ndarray:
        return np.abs((self.pos + self.vel * frame + n) % (2 * n) - n)


def draw_distractors(rng: np.random.Generator, count: int, n: int) -> list[Blob]:
    """`count` distractor blobs for an n x n (supersampled) canvas."""
    return [
        Blob(
            pos=rng.uniform(0, n, size=2),
            vel=rng.normal(0, 1.2 * SUPERSAMPLE, size=2),
            radius=rng.uniform(1.5, 3.0) * SUPERSAMPLE,
            colour=rng.uniform(40, 230, size=3),
        )
        for _ in range(count)
    ]


def paint_distractors(
    img: np.ndarray, blobs: list[Blob], frame: int, gx: np.ndarray, gy: np.ndarray
) -> None:
    """Paint `blobs` as they are at `frame` onto the square canvas `img`, in place."""
    n = img.shape[0]
    for b in blobs:
        p = b.centre(frame, n)
        img[(gx - p[0]) ** 2 + (gy - p[1]) ** 2 <= b.radius**2] = b.colour


@dataclass(frozen=True)
class Trajectory:
    """Per-frame object state, in supersampled pixels and radians; `gain` multiplies the
    object's colours (its brightness)."""

    x: np.ndarray
    y: np.ndarray
    angle: np.ndarray
    half_size: np.ndarray
    gain: np.ndarray


@dataclass(frozen=True)
class Appearance:
    """How an object looks: its shape (a key of `MARKERS`), alternating stripes of `colour_a` and
    `colour_b` (`stripes` of them per half-width) and a marker spot of 255 - `colour_b`."""

    shape: int
    colour_a: np.ndarray
    colour_b: np.ndarray
    stripes: float


def paint_object(
    img: np.ndarray,
    look: Appearance,
    path: Trajectory,
    frame: int,
    gx: np.ndarray,
    gy: np.ndarray,
) -> None:
    """Paint an object that looks like `look` as it is at `frame` of `path` onto the canvas
    `img` (pixel centres `gx`, `gy`), in place."""
    # Object coordinates of every pixel: inverse rotation about the object's centre.
    c, s = math.cos(path.angle[frame]), math.sin(path.angle[frame])
    dx, dy = gx - path.x[frame], gy - path.y[frame]
    u = (c * dx + s * dy) / path.half_size[frame]
    v = (-s * dx + c * dy) / path.half_size[frame]
    mask = shape_mask(look.shape, u, v)
    stripe = np.floor((u + 1) * look.stripes) % 2 == 0
    gain = path.gain[frame]
    img[mask & stripe] = look.colour_a * gain
    img[mask & ~stripe] = look.colour_b * gain
    # An off-centre spot on every object (any class) makes its orientation trackable.
    mu, mv = MARKERS[look.shape]
    img[mask & ((u - mu) ** 2 + (v - mv) ** 2 <= MARKER_RADIUS**2)] = (255.0 - look.colour_b) * gain


def finish_frame(img: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    """The supersampled canvas `img` (SUPERSAMPLE = 2) brought down to a uint8 frame of half its
    side, with Gaussian pixel noise of standard deviation `noise`."""
    # Average the 2x2 supersamples in a fixed order (a reduction's order, and so its last bit,
    # can depend on memory alignment; the output bytes must not).
    small = (img[0::2, 0::2] + img[1::2, 0::2] + img[0::2, 1::2] + img[1::2, 1::2]) / 4
    small += rng.normal(0, noise, size=small.shape)
    return small.clip(0, 255).round().astype(np.uint8)
