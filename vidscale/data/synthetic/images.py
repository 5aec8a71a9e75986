"""The built-in image demo set: real JPEG files whose classes only texture tells apart.

Ten classes, {checker, grid, hstripes, speckle, vstripes} x {coarse, fine}: the pattern and its
scale (period) filling one object on a smooth two-colour background, with pixel noise. All else
is drawn independently of the class for every image: the object's shape (circle, square,
triangle, cross or ring), position, size and rotation; the pattern's exact period, phase and
duty; its two colours; the background's colours and gradient direction. So no pixel's mean
depends on the class: a ridge classifier on pixels gets about 20% (chance is 10%; what it gets
comes from classes differing in variance), one on the amplitude spectrum, which ignores where
things are, about 95% (a test checks both). Every class is its own mirror image, so horizontal
flips keep labels, and the two scales stay apart under random-resized crops down to a quarter
of the area (a zoom of at most 2x: fine periods are 3.2-4.2 px at 32 px, coarse 9.0-10.9 px).

The classes are patterns, not outlines, by measurement: `vidscale train --recipe
demo_resnet18_images_b64_e10_sgd` learns them in its 10 epochs, where object shapes as the
classes were learnt far less well with the same optimiser settings (docs/benchmarks.md,
"Numbers moved out of module docstrings"). The object still varies in shape, so the network
must find the pattern inside outlines of every kind.

Images are rendered at `SUPERSAMPLE` times the size and averaged down, so edges and patterns
are anti-aliased. Files are written in the `imagefolder` layout
(`<out>/<split>/<class>/<class>_<k:04d>.jpg`; `CLASSES` is in that layout's sorted label order),
each image a pure function of (seed, split, class, k): the same seed gives the same bytes, and
asking for more images leaves the others unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vidscale.data.prepared.shards import encode_jpeg

PATTERNS = ("checker", "grid", "hstripes", "speckle", "vstripes")
SCALES = {"coarse": (0.28, 0.34), "fine": (0.10, 0.13)}  # period, fraction of the image side
CLASSES = tuple(f"{pattern}_{scale}" for pattern in PATTERNS for scale in SCALES)
SHAPES = ("circle", "square", "triangle", "cross", "ring")  # drawn at random, not the class
SUPERSAMPLE = 4
RADIUS = (0.44, 0.54)  # the object's radius, fraction of the side: most of any crop shows it
MIN_CONTRAST = 90.0  # luma difference of the pattern's two colours (object vs background: half)


@dataclass(frozen=True)
class ImageSynthSummary:
    root: Path
    classes: int
    train_images: int
    val_images: int
    size: int

    def __str__(self) -> str:
        return (
            f"wrote {self.train_images} train + {self.val_images} val images "
            f"({self.classes} classes, {self.size}x{self.size} JPEG) to {self.root} "
            "(prepare or train with the imagefolder layout)"
        )


def _luma(rgb: np.ndarray) -> float:
    return float(rgb @ np.array([0.299, 0.587, 0.114]))


def _colours(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pattern colours a, b and background colours c0, c1, redrawn until the pattern and the
    object stand out (an image that shows no pattern would be label noise)."""
    while True:
        a, b, c0, c1 = rng.uniform(0, 255, (4, 3))
        obj, bg = (_luma(a) + _luma(b)) / 2, (_luma(c0) + _luma(c1)) / 2
        if abs(_luma(a) - _luma(b)) >= MIN_CONTRAST and abs(obj - bg) >= MIN_CONTRAST / 2:
            return a, b, c0, c1


def _shape_mask(shape: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Inside-mask in object coordinates (the object's radius is 1)."""
    r = np.hypot(u, v)
    match shape:
        case "circle":
            return r <= 0.9
        case "square":
            return np.maximum(np.abs(u), np.abs(v)) <= 0.8
        case "triangle":  # equilateral, inradius 0.55
            normals = [np.pi / 2 + 2 * np.pi * k / 3 for k in range(3)]
            return np.all([u * np.cos(a) + v * np.sin(a) <= 0.55 for a in normals], axis=0)
        case "cross":
            arm = 0.32
            return ((np.abs(u) <= arm) & (np.abs(v) <= 1)) | ((np.abs(v) <= arm) & (np.abs(u) <= 1))
        case "ring":
            return (r >= 0.5) & (r <= 1.0)
    raise ValueError(f"unknown shape {shape!r}")


def _pattern(
    pattern: str, period: float, x: np.ndarray, y: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Where the pattern shows its first colour (bool), in image coordinates (pixels)."""
    s, t = x / period + rng.uniform(), y / period + rng.uniform()
    match pattern:
        case "checker":
            return (s % 1 < 0.5) ^ (t % 1 < 0.5)
        case "grid":
            return (s % 1 < 0.3) | (t % 1 < 0.3)
        case "hstripes":
            return t % 1 < rng.uniform(0.4, 0.6)
        case "vstripes":
            return s % 1 < rng.uniform(0.4, 0.6)
        case "speckle":  # square cells of one period, each of either colour
            i, j = np.floor(s).astype(np.int64), np.floor(t).astype(np.int64)
            i, j = i - i.min(), j - j.min()
            return (rng.random((i.max() + 1, j.max() + 1)) < 0.5)[i, j]
    raise ValueError(f"unknown pattern {pattern!r}")


def render_image(label: int, *, rng: np.random.Generator, size: int, noise: float) -> np.ndarray:
    """One image of class `CLASSES[label]`: RGB uint8 (size, size, 3)."""
    pattern, scale = CLASSES[label].rsplit("_", 1)
    n = size * SUPERSAMPLE
    y, x = (np.mgrid[0:n, 0:n] + 0.5) / SUPERSAMPLE  # pixel centres, in output pixels
    a, b, c0, c1 = _colours(rng)
    direction = rng.uniform(0, 2 * np.pi)
    ramp = ((x - size / 2) * np.cos(direction) + (y - size / 2) * np.sin(direction)) / size + 0.5
    image = c0 + np.clip(ramp, 0, 1)[..., None] * (c1 - c0)

    radius = rng.uniform(*RADIUS) * size
    cx, cy = rng.uniform(radius * 0.8, size - radius * 0.8, 2)
    theta = rng.uniform(0, 2 * np.pi)
    u = ((x - cx) * np.cos(theta) + (y - cy) * np.sin(theta)) / radius
    v = (-(x - cx) * np.sin(theta) + (y - cy) * np.cos(theta)) / radius
    inside = _shape_mask(SHAPES[rng.integers(len(SHAPES))], u, v)
    first = _pattern(pattern, rng.uniform(*SCALES[scale]) * size, x, y, rng)
    image[inside] = np.where(first[inside][:, None], a, b)

    small = image.reshape(size, SUPERSAMPLE, size, SUPERSAMPLE, 3).mean(axis=(1, 3))
    small += rng.normal(0, noise, small.shape)
    return np.clip(np.rint(small), 0, 255).astype(np.uint8)


def write_synthetic_images(
    out: Path,
    *,
    seed: int = 0,
    train_per_class: int = 256,
    val_per_class: int = 64,
    size: int = 32,
    noise: float = 3.0,
    quality: int = 95,
) -> ImageSynthSummary:
    """Write the image demo set to `out` in the `imagefolder` layout (module docstring):
    `train_per_class` and `val_per_class` JPEGs of `size` x `size` pixels per class."""
    if size < 16:
        raise ValueError(f"size must be >= 16 pixels, got {size}")
    out = Path(out)
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for label, name in enumerate(CLASSES):
            folder = out / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(count):
                # (seed, split, class, number) only: more images leave the others unchanged.
                rng = np.random.default_rng((seed, int(split == "val"), label, k))
                image = render_image(label, rng=rng, size=size, noise=noise)
                (folder / f"{name}_{k:04d}.jpg").write_bytes(encode_jpeg(image, quality=quality))
    n = len(CLASSES)
    return ImageSynthSummary(out, n, train_per_class * n, val_per_class * n, size)
