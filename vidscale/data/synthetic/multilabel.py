"""The multi-label demo dataset: three moving objects a video, each moving as one class does.

The classes are six of the single-label demo's eight (moving left/right, up/down, growing/
shrinking; see `synthetic.videos`), and each object follows `synthetic.videos.class_trajectory`
for its class, in its own quadrant of the frame: the class's attribute ramps in the class's
direction while the other three (rotation among them) go out and back. A video's label set is
its objects' classes: two or three distinct classes (in a two-class video two of the objects
share a class, chosen at random).

The single-label demo's brightening/darkening pair is left out, and the objects here keep their
brightness (`class_trajectory(..., brightness=False)`): the videos are the ones this demo's
recipe and records were made with, byte for byte. Every object turns out and back, as a
nuisance; the direction of a turn is no class in either demo (among several objects it was not
learned at this size, docs/benchmarks.md, "Multi-label demo").

Every video has three objects, whatever its number of labels, so a model of unordered frames
cannot count objects to guess how many labels a video has; with no class information in single
frames (see `synthetic`), such a model (TSN) scores each class's average precision at about its
positive rate, (2.5 / 6) on average, while a temporal model (TSM) can recover every label.
Objects are drawn in a random order, each in a quadrant of its own, so they never overlap.
Videos are encoded as the single-label demo's are, so the bytes are a pure function of the seed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from vidscale.data.layouts.multilabel import write_multilabel_annotations
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
from vidscale.data.synthetic.videos import CLASSES, class_trajectory
from vidscale.data.synthetic.writer import VideoJob, check_video_shape, write_videos

# The label space: the single-label demo's translation and scaling classes.
MULTI_LABEL_CLASSES = (
    "moving_left",
    "moving_right",
    "moving_up",
    "moving_down",
    "growing",
    "shrinking",
)
OBJECTS = 3
LABELS_PER_VIDEO = (2, 3)  # distinct classes among the objects, equally likely
# An object's region (and with it its size and travel) as a fraction of the frame side: one
# quadrant each, so objects never overlap.
REGION = 0.5
DEFAULT_SIZE = 48  # frame side in pixels: 24-pixel quadrants


@dataclass(frozen=True)
class MultiLabelSynthSummary:
    root: Path
    classes: int
    train_videos: int
    val_videos: int
    size: int
    num_frames: int

    def __str__(self) -> str:
        return (
            f"wrote {self.train_videos} train + {self.val_videos} val multi-label videos "
            f"({self.classes} classes, {self.size}x{self.size}, {self.num_frames} frames) "
            f"to {self.root}"
        )


@dataclass(frozen=True)
class MovingObject:
    """One object: its class (an index into `MULTI_LABEL_CLASSES`), path (supersampled pixels
    of the whole frame) and appearance."""

    label: int
    trajectory: Trajectory
    look: Appearance


def draw_object_labels(rng: np.random.Generator) -> tuple[int, ...]:
    """The classes (indices into `MULTI_LABEL_CLASSES`) of a video's `OBJECTS` objects, in
    drawing order: two or three distinct classes, equally likely, every class equally likely
    in every position."""
    distinct = int(rng.choice(LABELS_PER_VIDEO))
    labels = [int(c) for c in rng.choice(len(MULTI_LABEL_CLASSES), size=distinct, replace=False)]
    labels += [labels[int(rng.integers(distinct))] for _ in range(OBJECTS - distinct)]
    return tuple(labels[i] for i in rng.permutation(OBJECTS))


def place_objects(
    labels: tuple[int, ...], *, rng: np.random.Generator, n: int, num_frames: int
) -> list[MovingObject]:
    """One object per label (an index into `MULTI_LABEL_CLASSES`) in an n x n (supersampled)
    frame, each in a corner region of its own."""
    region = round(REGION * n)
    corners = [(0, 0), (n - region, 0), (0, n - region), (n - region, n - region)]
    objects = []
    for label, corner in zip(labels, rng.permutation(len(corners)), strict=False):
        motion = CLASSES.index(MULTI_LABEL_CLASSES[label])
        local = class_trajectory(motion, num_frames, region, rng, brightness=False)
        dx, dy = corners[corner]
        colour_a = rng.uniform(150, 255, size=3)
        shape = int(rng.integers(len(MARKERS)))
        colour_b = colour_a * rng.uniform(0.35, 0.7)
        objects.append(
            MovingObject(
                label=label,
                trajectory=replace(local, x=local.x + dx, y=local.y + dy),
                look=Appearance(shape, colour_a, colour_b, stripes=float(rng.uniform(2.5, 5.0))),
            )
        )
    return objects


def render_multilabel_video(
    labels: tuple[int, ...],
    *,
    rng: np.random.Generator,
    size: int,
    num_frames: int,
    noise: float,
    distractors: int,
) -> np.ndarray:
    """(T, size, size, 3) uint8 RGB frames with one moving object per entry of `labels` (at most
    four: one per corner region)."""
    if not 1 <= len(labels) <= 4:
        raise ValueError(f"between 1 and 4 objects fit, got {len(labels)}")
    n = size * SUPERSAMPLE
    objects = place_objects(labels, rng=rng, n=n, num_frames=num_frames)
    backdrop = draw_background(rng, n)
    blobs = draw_distractors(rng, distractors, n)
    gx, gy = pixel_grid(n)
    frames = np.empty((num_frames, size, size, 3), dtype=np.uint8)
    for i in range(num_frames):
        img = backdrop.copy()
        paint_distractors(img, blobs, i, gx, gy)
        for obj in objects:
            paint_object(img, obj.look, obj.trajectory, i, gx, gy)
        frames[i] = finish_frame(img, rng, noise)
    return frames


def video_labels(seed: np.random.SeedSequence) -> frozenset[int]:
    """The label set of the video drawn from `seed` (its first draws), without rendering it."""
    return frozenset(draw_object_labels(np.random.default_rng(seed)))


def render_drawn_video(
    *, rng: np.random.Generator, size: int, num_frames: int, noise: float, distractors: int
) -> np.ndarray:
    """`render_multilabel_video` of the objects `draw_object_labels` draws first from `rng`
    (the labels `video_labels` reads back from the same seed)."""
    return render_multilabel_video(
        draw_object_labels(rng),
        rng=rng,
        size=size,
        num_frames=num_frames,
        noise=noise,
        distractors=distractors,
    )


def write_multilabel_dataset(
    out: Path,
    *,
    seed: int = 0,
    train_videos: int = 2048,
    val_videos: int = 256,
    size: int = DEFAULT_SIZE,
    num_frames: int = 16,
    fps: int = 15,
    gop: int = 8,
    noise: float = 4.0,
    distractors: int = 1,
    workers: int = 0,
) -> MultiLabelSynthSummary:
    """Write the multi-label demo to `out`: `videos/<split>/<split>_<k>.mp4`, `train.csv` and
    `val.csv` (`path,labels`, paths relative to `out`, labels as `;`-separated class names in
    class order; see `layouts.multilabel`) and `classes.txt`. The same seed gives the same
    bytes; asking for more videos adds new ones and leaves the others unchanged; `workers=0`
    picks a process count."""
    check_video_shape(size, num_frames)
    if train_videos < 0 or val_videos < 0:
        raise ValueError(f"video counts must be >= 0, got {train_videos} and {val_videos}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    splits = (("train", train_videos), ("val", val_videos))
    render = partial(
        render_drawn_video, size=size, num_frames=num_frames, noise=noise, distractors=distractors
    )
    jobs = {
        split: [
            VideoJob(
                out / f"videos/{split}/{split}_{k:05d}.mp4",
                np.random.SeedSequence((seed, split == "val", k)),
                render,
                fps,
                gop,
            )
            for k in range(count)
        ]
        for split, count in splits
    }
    write_videos([job for split_jobs in jobs.values() for job in split_jobs], workers=workers)
    (out / "classes.txt").write_text("\n".join(MULTI_LABEL_CLASSES) + "\n")
    for split, split_jobs in jobs.items():
        rows = [
            (
                job.path.relative_to(out).as_posix(),
                [MULTI_LABEL_CLASSES[c] for c in sorted(video_labels(job.seed))],
            )
            for job in split_jobs
        ]
        write_multilabel_annotations(out / f"{split}.csv", rows)
    return MultiLabelSynthSummary(
        out, len(MULTI_LABEL_CLASSES), train_videos, val_videos, size, num_frames
    )
