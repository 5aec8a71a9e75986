"""The built-in demo dataset: real H.264 videos whose classes only temporal order tells apart.

Eight classes in four order-reversed pairs: moving left/right, moving up/down, rotating
clockwise/counter-clockwise, growing/shrinking (DESIGN §8). A textured object on a textured
background, with distractor blobs and pixel noise, changes in all four attributes (x, y, angle,
log-size) in every video. The class's attribute follows a ramp: monotone over the clip, in the
class's direction. The other three follow a "vee" over the same range: out to one end by mid-clip
and back, in a random direction. So the class lies only in which attribute keeps its direction:

- within a pair, a video and its time reversal are equally likely under the other class, so any
  model of unordered frames is at chance;
- across pairs, every attribute sweeps the same range in every class (ramp and vee visit the same
  values, and TSN's segment centres pick the same evenly spaced values from both), so no
  attribute is still in some classes and moving in others: averaging per-frame predictions
  (TSN's consensus) has nothing to average over. Shape, texture, colours, ranges, distractors
  and noise are drawn independently of the class, and trajectories are centred on a random
  centre, so single frames carry no class information either.

A temporal model separates the classes by the sign of each attribute's change summed over the
clip: the ramp keeps its sign, the vee's two halves cancel. Videos are encoded with libx264 on one
thread, so the bytes are a pure function of the seed.
"""

from __future__ import annotations

import math
import multiprocessing as mp
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from vidscale.data.annotations import write_annotations

CLASSES = (
    "moving_left",
    "moving_right",
    "moving_up",
    "moving_down",
    "rotating_clockwise",
    "rotating_counterclockwise",
    "growing",
    "shrinking",
)
# (attribute, direction) per class; image y points down and angles turn clockwise on screen.
_CLASS_MOTION = {
    "moving_left": ("x", -1),
    "moving_right": ("x", 1),
    "moving_up": ("y", -1),
    "moving_down": ("y", 1),
    "rotating_clockwise": ("angle", 1),
    "rotating_counterclockwise": ("angle", -1),
    "growing": ("log_size", 1),
    "shrinking": ("log_size", -1),
}
# Where each shape carries its marker spot (object coordinates), well inside the shape.
MARKERS = {0: (0.0, -0.55), 1: (-0.6, -0.6), 2: (-0.6, -0.6), 3: (-0.55, -0.3)}
MARKER_RADIUS = 0.3
SUPERSAMPLE = 2  # render at 2x and average down: sub-pixel motion stays visible
HALF_SIZE = (0.17, 0.26)  # object half-size at mid-range, fraction of the frame side
TRANSLATION_RANGE = (0.30, 0.42)  # extent of x or y travel, fraction of the frame side
ROTATION_RANGE = (math.radians(120), math.radians(200))
LOG_SIZE_RANGE = (0.45, 0.75)  # extent of log(size) travel
CENTRE = (0.38, 0.62)  # trajectory centre, fraction of the frame side
JITTER = 0.15  # px (supersampled) of per-frame position noise


@dataclass(frozen=True)
class SynthSummary:
    root: Path
    classes: int
    train_videos: int
    val_videos: int
    size: int
    num_frames: int

    def __str__(self) -> str:
        return (
            f"wrote {self.train_videos} train + {self.val_videos} val videos "
            f"({self.classes} classes, {self.size}x{self.size}, {self.num_frames} frames) "
            f"to {self.root}"
        )


@dataclass(frozen=True)
class _Job:
    path: Path
    label: int
    seed: np.random.SeedSequence
    size: int
    num_frames: int
    fps: int
    gop: int
    noise: float
    distractors: int


@dataclass(frozen=True)
class Trajectory:
    """Per-frame object state, in supersampled pixels and radians."""

    x: np.ndarray
    y: np.ndarray
    angle: np.ndarray
    half_size: np.ndarray


def motion_profiles(num_frames: int) -> tuple[np.ndarray, np.ndarray]:
    """(ramp, vee) over `num_frames`, both in [-1/2, 1/2]: the ramp rises monotonically from -1/2
    to 1/2; the vee falls from 1/2 towards -1/2 at mid-clip (reached between the two middle
    frames when the count is even) and rises back, so the two visit the same values."""
    u = np.linspace(-1.0, 1.0, num_frames)
    return u / 2, np.abs(u) - 0.5


def class_trajectory(label: int, num_frames: int, n: int, rng: np.random.Generator) -> Trajectory:
    """State of the object for class `label` in an n x n (supersampled) frame.

    Every attribute moves by a class-independent random extent around a random centre; only the
    profile (ramp with the class's sign for its attribute, vee with a random sign otherwise)
    depends on the class.
    """
    attribute, direction = _CLASS_MOTION[CLASSES[label]]
    ramp, vee = motion_profiles(num_frames)
    extents = {
        "x": rng.uniform(*TRANSLATION_RANGE) * n,
        "y": rng.uniform(*TRANSLATION_RANGE) * n,
        "angle": rng.uniform(*ROTATION_RANGE),
        "log_size": rng.uniform(*LOG_SIZE_RANGE),
    }
    vee_signs = rng.choice([-1.0, 1.0], size=len(extents))
    path = {
        name: extent * (direction * ramp if name == attribute else sign * vee)
        for (name, extent), sign in zip(extents.items(), vee_signs, strict=True)
    }
    centre = rng.uniform(*CENTRE, size=2) * n
    jitter = rng.normal(0.0, JITTER, size=(2, num_frames))
    half_size = math.exp(rng.uniform(math.log(HALF_SIZE[0]), math.log(HALF_SIZE[1]))) * n
    # math.exp per frame: numpy's vectorised exp may differ in the last bit between the SIMD
    # body and the scalar tail of an array, which would make the bytes seed-unstable.
    sizes = np.array([half_size * math.exp(v) for v in path["log_size"]])
    return Trajectory(
        x=centre[0] + path["x"] + jitter[0],
        y=centre[1] + path["y"] + jitter[1],
        angle=rng.uniform(0, 2 * math.pi) + path["angle"],
        half_size=sizes,
    )


def _background(rng: np.random.Generator, n: int) -> np.ndarray:
    """Low-frequency colour blotches plus fine texture, moderately dark (the object stands out)."""
    coarse = rng.uniform(20, 110, size=(4, 4, 3))
    idx = np.linspace(0, 3, n)
    i0 = np.floor(idx).astype(int).clip(0, 2)
    f = (idx - i0)[:, None]
    rows = coarse[i0] * (1 - f[..., None]) + coarse[i0 + 1] * f[..., None]
    img = rows[:, i0] * (1 - f[None, :, :]) + rows[:, i0 + 1] * f[None, :, :]
    return img + rng.normal(0, 12, size=(n, n, 1))


def _shape_mask(kind: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Shapes without rotational symmetry, in object coordinates (u, v) in [-1, 1]."""
    inside = (np.abs(u) <= 1) & (np.abs(v) <= 1)
    if kind == 0:  # triangle
        return inside & (np.abs(u) <= (1 - v) / 2 + 0.05)
    if kind == 1:  # L shape
        return inside & ((u <= -0.2) | (v >= 0.3))
    if kind == 2:  # square with a notch
        return inside & ~((u > 0.1) & (v < -0.1))
    return inside & (u * u + v * v <= 1) & ~((u > 0.2) & (np.abs(v) < 0.35))  # notched disk


@dataclass(frozen=True)
class _Blob:
    """A distractor: a disk moving in a straight line (bouncing off the borders), whatever the
    class."""

    pos: np.ndarray
    vel: np.ndarray
    radius: float
    colour: np.ndarray

    def centre(self, frame: int, n: int) -> np.ndarray:
        return np.abs((self.pos + self.vel * frame + n) % (2 * n) - n)


def _distractors(rng: np.random.Generator, count: int, n: int) -> list[_Blob]:
    return [
        _Blob(
            pos=rng.uniform(0, n, size=2),
            vel=rng.normal(0, 1.2 * SUPERSAMPLE, size=2),
            radius=rng.uniform(1.5, 3.0) * SUPERSAMPLE,
            colour=rng.uniform(40, 230, size=3),
        )
        for _ in range(count)
    ]


def render_video(
    label: int,
    *,
    rng: np.random.Generator,
    size: int,
    num_frames: int,
    noise: float,
    distractors: int,
) -> np.ndarray:
    """(T, size, size, 3) uint8 RGB frames of one video of class `label`."""
    n = size * SUPERSAMPLE
    traj = class_trajectory(label, num_frames, n, rng)
    background = _background(rng, n)
    kind = int(rng.integers(4))
    colour_a = rng.uniform(150, 255, size=3)
    colour_b = colour_a * rng.uniform(0.35, 0.7)
    stripes = rng.uniform(2.5, 5.0)
    marker_colour = 255.0 - colour_b
    blobs = _distractors(rng, distractors, n)
    gy, gx = np.mgrid[0:n, 0:n].astype(np.float64) + 0.5
    frames = np.empty((num_frames, size, size, 3), dtype=np.uint8)
    for i in range(num_frames):
        img = background.copy()
        for b in blobs:
            p = b.centre(i, n)
            img[(gx - p[0]) ** 2 + (gy - p[1]) ** 2 <= b.radius**2] = b.colour
        # Object coordinates of every pixel: inverse rotation about the object's centre.
        c, s = math.cos(traj.angle[i]), math.sin(traj.angle[i])
        dx, dy = gx - traj.x[i], gy - traj.y[i]
        u = (c * dx + s * dy) / traj.half_size[i]
        v = (-s * dx + c * dy) / traj.half_size[i]
        texture = (np.floor((u + 1) * stripes) % 2 == 0)[..., None]
        mask = _shape_mask(kind, u, v)
        img = np.where(mask[..., None], np.where(texture, colour_a, colour_b), img)
        # An off-centre spot on every object (any class) makes the turning direction trackable.
        mu, mv = MARKERS[kind]
        spot = mask & ((u - mu) ** 2 + (v - mv) ** 2 <= MARKER_RADIUS**2)
        img = np.where(spot[..., None], marker_colour, img)
        # Average the 2x2 supersamples in a fixed order (a reduction's order, and so its last
        # bit, can depend on memory alignment; the output bytes must not).
        small = (img[0::2, 0::2] + img[1::2, 0::2] + img[0::2, 1::2] + img[1::2, 1::2]) / 4
        small += rng.normal(0, noise, size=small.shape)
        frames[i] = small.clip(0, 255).round().astype(np.uint8)
    return frames


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


def _write_one(job: _Job) -> None:
    frames = render_video(
        job.label,
        rng=np.random.default_rng(job.seed),
        size=job.size,
        num_frames=job.num_frames,
        noise=job.noise,
        distractors=job.distractors,
    )
    encode_h264(frames, job.path, fps=job.fps, gop=job.gop)


def write_synthetic_dataset(
    out: Path,
    *,
    seed: int = 0,
    train_per_class: int = 96,
    val_per_class: int = 24,
    size: int = 32,
    num_frames: int = 16,
    fps: int = 15,
    gop: int = 8,
    noise: float = 4.0,
    distractors: int = 2,
    workers: int = 0,
) -> SynthSummary:
    """Write the demo dataset to `out`: `videos/<split>/<class>/<class>_<k>.mp4`, `train.csv`
    and `val.csv` (`path,label`, paths relative to `out`, labels as class names) and
    `classes.txt`. The same seed gives the same bytes; `workers=0` picks a process count."""
    if size % 2 or size < 16:
        raise ValueError(f"size must be even and >= 16 (H.264 4:2:0), got {size}")
    if num_frames < 4:
        raise ValueError(f"num_frames must be >= 4, got {num_frames}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    splits = (("train", train_per_class), ("val", val_per_class))
    names = [
        (split, label, k, f"videos/{split}/{name}/{name}_{k:04d}.mp4")
        for split, count in splits
        for label, name in enumerate(CLASSES)
        for k in range(count)
    ]
    # Each video's randomness depends on (seed, split, class, number) only: asking for more
    # videos adds new ones and leaves the others unchanged.
    jobs = [
        _Job(
            out / rel,
            label,
            np.random.SeedSequence((seed, split == "val", label, k)),
            size,
            num_frames,
            fps,
            gop,
            noise,
            distractors,
        )
        for split, label, k, rel in names
    ]
    _run(jobs, workers=workers or min(4, mp.cpu_count()))
    (out / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    for split, _ in splits:
        rows = [(rel, CLASSES[label]) for s, label, _, rel in names if s == split]
        write_annotations(out / f"{split}.csv", rows)
    return SynthSummary(
        out,
        len(CLASSES),
        train_per_class * len(CLASSES),
        val_per_class * len(CLASSES),
        size,
        num_frames,
    )


def _run(jobs: list[_Job], *, workers: int) -> None:
    # Few videos: worker start-up costs more than it saves.
    if workers > 1 and len(jobs) >= 64:
        with mp.get_context("fork").Pool(workers) as pool:
            pool.map(_write_one, jobs, chunksize=8)
    else:
        for job in jobs:
            _write_one(job)
