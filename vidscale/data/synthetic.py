"""The built-in demo dataset: real H.264 videos whose classes only temporal order tells apart.

Eight classes in four order-reversed pairs: moving left/right, moving up/down, rotating
clockwise/counter-clockwise, growing/shrinking. A textured object moves on a textured
background with distractor blobs and pixel noise. Every single frame is drawn from the same
distribution whatever the class, so a model that averages per-frame predictions (TSN) cannot
beat chance, while a temporal model (TSM) can:

- trajectories are centred on a random centre (the mean position over a clip reveals nothing);
- the object's orientation, size and position per frame have the same marginal distribution in
  every class (a translating object's constant size is drawn from the per-frame size
  distribution of the growing/shrinking classes; its constant angle is uniform, as is the angle
  of a rotating object at any frame);
- shape, texture, colours, speed, distractors and noise are independent of the class.

Videos are encoded with libx264 (single-threaded, so the bytes are a pure function of the seed).
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
SUPERSAMPLE = 2  # render at 2x and average down: sub-pixel motion stays visible
LOG_SCALE_CHANGE = (0.7, 1.0)  # growing/shrinking: change of log(size) over the clip


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
    seed: int
    size: int
    num_frames: int
    fps: int
    gop: int
    noise: float
    distractors: int


@dataclass(frozen=True)
class _Blob:
    """A distractor: a disk moving on its own, independent of the class."""

    pos: np.ndarray
    vel: np.ndarray
    radius: float
    colour: np.ndarray


def _background(rng: np.random.Generator, n: int) -> np.ndarray:
    """Low-frequency colour blotches plus fine texture, moderately dark (object stands out)."""
    coarse = rng.uniform(20, 110, size=(4, 4, 3))
    idx = np.linspace(0, 3, n)
    i0 = np.floor(idx).astype(int).clip(0, 2)
    f = (idx - i0)[:, None]
    rows = coarse[i0] * (1 - f[..., None]) + coarse[i0 + 1] * f[..., None]
    img = rows[:, i0] * (1 - f[None, :, :]) + rows[:, i0 + 1] * f[None, :, :]
    return img + rng.normal(0, 12, size=(n, n, 1))


def _shape_mask(kind: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Orientation-revealing shapes in object coordinates (u, v) in [-1, 1]."""
    inside = (np.abs(u) <= 1) & (np.abs(v) <= 1)
    if kind == 0:  # arrow-like triangle
        return inside & (v >= -1) & (np.abs(u) <= (1 - v) / 2 + 0.05)
    if kind == 1:  # L shape
        return inside & ((u <= -0.2) | (v >= 0.3))
    if kind == 2:  # square with a notch
        return inside & ~((u > 0.1) & (v < -0.1))
    return inside & (u * u + v * v <= 1) & ~((u > 0.2) & (np.abs(v) < 0.35))  # notched disk


def _trajectory(label: int, t: np.ndarray, rng: np.random.Generator, n: int) -> dict:
    """Per-frame centre, angle and scale for class `label` (t centred on 0)."""
    base = math.exp(rng.uniform(math.log(0.22), math.log(0.34))) * n  # object half-size in px
    # Motion is set per clip, so it does not depend on the frame count: the object travels
    # 45-65% of the frame, turns 150-240 degrees, or changes size by a factor of e^0.7-e^1.0.
    steps = max(2 * float(t.max()), 1.0)
    rate = rng.uniform(*LOG_SCALE_CHANGE) / steps
    span = t.max()
    # Constant size drawn from the per-frame size distribution of growing/shrinking objects.
    const_scale = base * math.exp(rate * rng.uniform(-span, span))
    angle0 = rng.uniform(0, 2 * math.pi)
    speed = rng.uniform(0.45, 0.65) * n / steps  # px per frame (supersampled grid)
    omega = math.radians(rng.uniform(150, 240)) / steps  # rad per frame
    centre = rng.uniform(0.3 * n, 0.7 * n, size=2)
    zeros = np.zeros_like(t)
    x, y = centre[0] + zeros, centre[1] + zeros
    angle, scale = angle0 + zeros, const_scale + zeros
    name = CLASSES[label]
    if name.startswith("moving"):
        sign = -1 if name in ("moving_left", "moving_up") else 1
        if name in ("moving_left", "moving_right"):
            x = centre[0] + sign * speed * t
        else:
            y = centre[1] + sign * speed * t
    elif name.startswith("rotating"):
        angle = angle0 + (1 if name == "rotating_clockwise" else -1) * omega * t
    else:
        sign = 1 if name == "growing" else -1
        # math.exp per frame: numpy's vectorised exp may differ in the last bit between the
        # SIMD body and the scalar tail of an array, which would make the bytes seed-unstable.
        scale = np.array([base * math.exp(sign * rate * ti) for ti in t])
    # Small jitter on every class so no axis is perfectly still in any of them.
    x = x + rng.normal(0, 0.15, size=t.shape)
    y = y + rng.normal(0, 0.15, size=t.shape)
    return {"x": x, "y": y, "angle": angle, "scale": scale}


def _render_video(job: _Job) -> np.ndarray:
    rng = np.random.default_rng(job.seed)
    n = job.size * SUPERSAMPLE
    t = np.arange(job.num_frames) - (job.num_frames - 1) / 2
    traj = _trajectory(job.label, t, rng, n)
    background = _background(rng, n)
    kind = int(rng.integers(4))
    colour_a = rng.uniform(150, 255, size=3)
    colour_b = colour_a * rng.uniform(0.35, 0.7)
    stripes = rng.uniform(2.5, 5.0)
    gy, gx = np.mgrid[0:n, 0:n].astype(np.float64) + 0.5
    blobs = [
        _Blob(
            pos=rng.uniform(0, n, size=2),
            vel=rng.normal(0, 1.2 * SUPERSAMPLE, size=2),
            radius=rng.uniform(1.5, 3.0) * SUPERSAMPLE,
            colour=rng.uniform(40, 230, size=3),
        )
        for _ in range(job.distractors)
    ]
    frames = np.empty((job.num_frames, job.size, job.size, 3), dtype=np.uint8)
    for i in range(job.num_frames):
        img = background.copy()
        for b in blobs:
            p = np.abs((b.pos + b.vel * i + n) % (2 * n) - n)  # bounce inside the frame
            img[(gx - p[0]) ** 2 + (gy - p[1]) ** 2 <= b.radius**2] = b.colour
        c, s = math.cos(traj["angle"][i]), math.sin(traj["angle"][i])
        dx, dy = gx - traj["x"][i], gy - traj["y"][i]
        u = (c * dx + s * dy) / traj["scale"][i]
        v = (-s * dx + c * dy) / traj["scale"][i]
        mask = _shape_mask(kind, u, v)
        texture = (np.floor((u + 1) * stripes) % 2 == 0)[..., None]
        img = np.where(mask[..., None], np.where(texture, colour_a, colour_b), img)
        # Average the 2x2 supersamples in a fixed order (a reduction's order, and so its last
        # bit, can depend on memory alignment; the output bytes must not).
        small = (img[0::2, 0::2] + img[1::2, 0::2] + img[0::2, 1::2] + img[1::2, 1::2]) / 4
        small += rng.normal(0, job.noise, size=small.shape)
        frames[i] = small.clip(0, 255).astype(np.uint8)
    return frames


def encode_h264(frames: np.ndarray, path: Path, *, fps: int, gop: int, crf: int = 17) -> None:
    """Write (T, H, W, 3) uint8 RGB frames as an H.264 .mp4 (deterministic, one thread)."""
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
        stream.codec_context.thread_count = 1  # x264 output is deterministic on one thread
        for rgb in frames:
            yuv = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            frame = av.VideoFrame.from_ndarray(yuv.to_ndarray().copy(), format="yuv420p")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _write_one(job: _Job) -> None:
    encode_h264(_render_video(job), job.path, fps=job.fps, gop=job.gop)


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
    """Write the demo dataset to `out` (videos/, train.csv, val.csv, classes.txt)."""
    if size % 2 or size < 16:
        raise ValueError(f"size must be even and >= 16 (H.264 4:2:0), got {size}")
    if num_frames < 2:
        raise ValueError(f"num_frames must be >= 2, got {num_frames}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jobs: list[_Job] = []
    rows: dict[str, list[tuple[str, str]]] = {"train": [], "val": []}
    seeds = np.random.SeedSequence(seed)
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for label, name in enumerate(CLASSES):
            for k in range(count):
                rel = f"videos/{split}/{name}/{name}_{k:04d}.mp4"
                child = seeds.spawn(1)[0]
                jobs.append(
                    _Job(
                        out / rel,
                        label,
                        int(child.generate_state(1)[0]),
                        size,
                        num_frames,
                        fps,
                        gop,
                        noise,
                        distractors,
                    )
                )
                rows[split].append((rel, name))
    n_workers = workers or min(4, mp.cpu_count())
    if n_workers > 1 and len(jobs) > 16:
        with mp.get_context("fork").Pool(n_workers) as pool:
            pool.map(_write_one, jobs, chunksize=8)
    else:
        for job in jobs:
            _write_one(job)
    (out / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    write_annotations(out / "train.csv", rows["train"])
    write_annotations(out / "val.csv", rows["val"])
    return SynthSummary(out, len(CLASSES), len(rows["train"]), len(rows["val"]), size, num_frames)
