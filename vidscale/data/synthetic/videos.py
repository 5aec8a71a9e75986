"""The built-in demo dataset: real H.264 videos whose classes only temporal order tells apart.

Eight classes in four order-reversed pairs: moving left/right, moving up/down, brightening/
darkening, growing/shrinking (DESIGN §8). A textured object on a textured background, with
distractor blobs and pixel noise, changes in all five attributes (x, y, angle, log-size,
log-brightness) in every video. The class's attribute follows a ramp: monotone over the clip, in
the class's direction. The other four follow a "vee" over the same range: out to one end by
mid-clip and back, in a random direction. So the class lies only in which attribute keeps its
direction:

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

Every object turns out and back, but the direction of a turn is no class: at 32 px TSM-ResNet-18
trained from scratch did not learn it in the demo's budget (docs/benchmarks.md, "The demo's
classes"): the rotation pair the demo once had stayed at 60-65% while the other six classes
reached 97-100%, and a two-class set of plain rotating shapes stayed at chance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from vidscale.data.annotations import write_annotations
from vidscale.data.synthetic.render import (
    MARKERS,
    SUPERSAMPLE,
    Appearance,
    Trajectory,
    draw_background,
    draw_distractors,
    finish_frame,
    paint_distractors,
    paint_object,
    pixel_grid,
)
from vidscale.data.synthetic.writer import VideoJob, check_video_shape, write_videos

CLASSES = (
    "moving_left",
    "moving_right",
    "moving_up",
    "moving_down",
    "brightening",
    "darkening",
    "growing",
    "shrinking",
)
# (attribute, direction) per class; image y points down. Brightness is a gain on the object's
# colours (`Trajectory.gain`), in log units as size is.
_CLASS_MOTION = {
    "moving_left": ("x", -1),
    "moving_right": ("x", 1),
    "moving_up": ("y", -1),
    "moving_down": ("y", 1),
    "brightening": ("log_gain", 1),
    "darkening": ("log_gain", -1),
    "growing": ("log_size", 1),
    "shrinking": ("log_size", -1),
}
HALF_SIZE = (0.17, 0.26)  # object half-size at mid-range, fraction of the frame side
TRANSLATION_RANGE = (0.30, 0.42)  # extent of x or y travel, fraction of the frame side
ROTATION_RANGE = (math.radians(120), math.radians(200))
LOG_SIZE_RANGE = (0.45, 0.75)  # extent of log(size) travel
LOG_GAIN_RANGE = (0.4, 0.6)  # extent of log(brightness) travel: x0.74-x1.35 about the middle
CENTRE = (0.38, 0.62)  # trajectory centre, fraction of the frame side
# The object's brighter colour at mid-brightness: x1.35 keeps it below 255 (no clipping hides
# the change), x0.74 keeps it above the background's mean.
COLOUR_RANGE = (130.0, 185.0)
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


def motion_profiles(num_frames: int) -> tuple[np.ndarray, np.ndarray]:
    """(ramp, vee) over `num_frames`, both in [-1/2, 1/2]: the ramp rises monotonically from -1/2
    to 1/2; the vee falls from 1/2 towards -1/2 at mid-clip (reached between the two middle
    frames when the count is even) and rises back, so the two visit the same values."""
    u = np.linspace(-1.0, 1.0, num_frames)
    return u / 2, np.abs(u) - 0.5


def class_trajectory(
    label: int, num_frames: int, n: int, rng: np.random.Generator, *, brightness: bool = True
) -> Trajectory:
    """State of the object for class `label` in an n x n (supersampled) frame.

    Every attribute moves by a class-independent random extent around a random centre; only the
    profile (ramp with the class's sign for its attribute, vee with a random sign otherwise)
    depends on the class. `brightness=False` (a brightness class excluded) keeps the gain at 1
    and draws nothing for it, as the multi-label demo's objects did before brightness existed.
    """
    attribute, direction = _CLASS_MOTION[CLASSES[label]]
    if attribute == "log_gain" and not brightness:
        raise ValueError(f"class {CLASSES[label]!r} needs brightness=True")
    ramp, vee = motion_profiles(num_frames)
    extents = {
        "x": rng.uniform(*TRANSLATION_RANGE) * n,
        "y": rng.uniform(*TRANSLATION_RANGE) * n,
        "angle": rng.uniform(*ROTATION_RANGE),
        "log_size": rng.uniform(*LOG_SIZE_RANGE),
    }
    if brightness:
        extents["log_gain"] = rng.uniform(*LOG_GAIN_RANGE)
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
    gains = [math.exp(v) for v in path["log_gain"]] if brightness else [1.0] * num_frames
    return Trajectory(
        x=centre[0] + path["x"] + jitter[0],
        y=centre[1] + path["y"] + jitter[1],
        angle=rng.uniform(0, 2 * math.pi) + path["angle"],
        half_size=sizes,
        gain=np.array(gains),
    )


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
    backdrop = draw_background(rng, n)
    shape = int(rng.integers(len(MARKERS)))
    colour_a = rng.uniform(*COLOUR_RANGE, size=3)
    colour_b = colour_a * rng.uniform(0.35, 0.7)
    look = Appearance(shape, colour_a, colour_b, stripes=rng.uniform(2.5, 5.0))
    blobs = draw_distractors(rng, distractors, n)
    gx, gy = pixel_grid(n)
    frames = np.empty((num_frames, size, size, 3), dtype=np.uint8)
    for i in range(num_frames):
        img = backdrop.copy()
        paint_distractors(img, blobs, i, gx, gy)
        paint_object(img, look, traj, i, gx, gy)
        frames[i] = finish_frame(img, rng, noise)
    return frames


def write_synthetic_dataset(
    out: Path,
    *,
    seed: int = 0,
    train_per_class: int = 192,
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
    check_video_shape(size, num_frames)
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
    render = partial(
        render_video, size=size, num_frames=num_frames, noise=noise, distractors=distractors
    )
    jobs = [
        VideoJob(
            out / rel,
            np.random.SeedSequence((seed, split == "val", label, k)),
            partial(render, label),
            fps,
            gop,
        )
        for split, label, k, rel in names
    ]
    write_videos(jobs, workers=workers)
    (out / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    for split, _ in splits:
        rows = [(rel, CLASSES[label]) for s, label, _, rel in names if s == split]
        write_annotations(out / f"{split}.csv", rows)
    videos = (train_per_class * len(CLASSES), val_per_class * len(CLASSES))
    return SynthSummary(out, len(CLASSES), *videos, size, num_frames)
