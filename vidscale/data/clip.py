"""The one clip-sampling path: a `ClipSpec` and a `FrameSource` in, the clip's views out.

Every reader of frames (raw video files, prepared RGB shards, prepared optical-flow shards, a
video given to `predict`) is a `FrameSource`: how many positions it has and the uint8 pixels
(T, H, W, C) at any of them. `sample_views` turns a source and a spec into the views of one
item, so the sampling and the transforms live here only, whatever the storage:

- RGB (`modality="rgb"`): a position is a frame, C = 3.
- Optical flow (`modality="flow"`): a position is the flow from frame k to k + 1, C = 2 (x, y)
  quantised to uint8 around 128 (`data.media.flow`). A clip takes, for each of its `frames`
  segments, a stack of L = `flow_stack` consecutive flows (Simonyan & Zisserman's stacked
  flow, TSN's segment sampling; Cong et al. §II: "10 consecutive flows are randomly sampled"),
  so the model sees 2L channels (x0, y0, x1, y1, ...) per segment. A horizontal flip mirrors the
  image and negates the x displacement: q -> 255 - q, which dequantises to exactly -x.

Training draws positions and augmentation from the caller's generator; evaluation is
deterministic (`num_clips` clips along time x `num_crops` crops, clip-major).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Protocol

import numpy as np
import torch

from vidscale.data.sampling import dense_indices, uniform_indices
from vidscale.data.transforms import (
    eval_crops,
    random_resized_crop_transform,
    short_side_jitter_transform,
    train_transform,
)
from vidscale.schedules.multigrid_shapes import jitter_range

Modality = Literal["rgb", "flow"]
MODALITIES: tuple[str, ...] = ("rgb", "flow")
CropName = Literal["multiscale", "random_resized", "short_side_jitter"]
CROPS: tuple[str, ...] = ("multiscale", "random_resized", "short_side_jitter")
JitterSampling = Literal["uniform", "inverse_uniform"]
JITTER_SAMPLINGS: tuple[str, ...] = ("uniform", "inverse_uniform")


@dataclass
class ClipSpec:
    """How a clip is sampled and transformed.

    `num_clips` x `num_crops` > 1 is multi-view testing: the item's clip is then
    (V, C, T, H, W) with V = num_clips * num_crops views (clip-major), for an evaluator that
    averages the views of each video. `max_stride` > `stride` makes dense training clips draw
    their stride uniformly from [stride, max_stride] (multigrid's long cycle: fewer frames
    cover the same time span, Wu et al. §3.2); 0 keeps `stride`. `modality` says what a
    position holds (see the module docstring); `flow_stack` is L, the consecutive flows
    stacked per segment.

    `crop` picks the training crop: "multiscale" (TSM's, from `scales`; the default),
    "random_resized" (the ImageNet augmentation of Szegedy et al. 2015 §6: a box of `area` x the
    image's area with aspect ratio w/h in `ratio`, log-uniform; see
    `transforms.random_resized_crop_box`) or "short_side_jitter" (PySlowFast's SlowFast / I3D
    augmentation: the frame resized so its short side is drawn from `jitter` = (min, max)
    pixels, then a random `crop_size` square; `jitter_sampling` "uniform" draws the side
    uniformly, "inverse_uniform" draws its reciprocal uniformly, PySlowFast's
    `DATA.INV_UNIFORM_SAMPLE`; see `transforms.short_side_jitter_transform`). Evaluation ignores
    it: short side `short_side`, then `crop_size` centre (or three) crops.

    `jitter` is the range at this spec's `crop_size`; `at_shape` scales it with the crop of a
    multigrid shape.
    """

    frames: int = 8
    sampling: Literal["uniform", "dense"] = "uniform"
    stride: int = 8
    crop_size: int = 224
    short_side: int = 256
    scales: tuple[float, ...] = (1.0, 0.875, 0.75, 0.66)
    flip: bool = True
    num_clips: int = 1
    num_crops: int = 1
    max_stride: int = 0
    modality: Modality = "rgb"
    flow_stack: int = 10
    crop: CropName = "multiscale"
    area: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    jitter: tuple[int, int] = (256, 320)
    jitter_sampling: JitterSampling = "uniform"

    @property
    def channels(self) -> int:
        """Input channels of the clips: 3 for RGB, 2L for L stacked flows."""
        return 3 if self.modality == "rgb" else 2 * self.flow_stack

    @property
    def stack(self) -> int:
        """Consecutive positions read per sampled position: L for flow, 1 for RGB."""
        return self.flow_stack if self.modality == "flow" else 1

    def check(self, field: str) -> None:
        """`ValueError` naming `field` (e.g. "data.train_clip") for an impossible spec."""
        if self.modality not in MODALITIES:
            raise ValueError(f"{field}.modality must be one of {MODALITIES}, got {self.modality!r}")
        if self.frames < 1 or self.flow_stack < 1 or self.stride < 1:
            raise ValueError(f"{field}: frames, flow_stack and stride must be >= 1")
        if self.num_clips < 1 or self.num_crops not in (1, 3):
            raise ValueError(f"{field}: num_clips must be >= 1 and num_crops 1 or 3")
        if self.crop not in CROPS:
            raise ValueError(f"{field}.crop must be one of {CROPS}, got {self.crop!r}")
        if not 0 < self.area[0] <= self.area[1] <= 1:
            raise ValueError(f"{field}.area must satisfy 0 < min <= max <= 1, got {self.area}")
        if not 0 < self.ratio[0] <= self.ratio[1] < float("inf"):
            raise ValueError(f"{field}.ratio must satisfy 0 < min <= max, got {self.ratio}")
        self._check_jitter(field)

    def _check_jitter(self, field: str) -> None:
        low, high = self.jitter
        if not 0 < low <= high:
            raise ValueError(f"{field}.jitter must satisfy 0 < min <= max, got {self.jitter}")
        if self.jitter_sampling not in JITTER_SAMPLINGS:
            raise ValueError(
                f"{field}.jitter_sampling must be one of {JITTER_SAMPLINGS}, "
                f"got {self.jitter_sampling!r}"
            )
        # A short side below the crop would give a smaller clip than crop_size (PySlowFast's
        # random_crop then returns the whole, smaller frame, which no batch can hold).
        if self.crop == "short_side_jitter" and low < self.crop_size:
            raise ValueError(
                f"{field}.jitter min must be >= crop_size ({self.crop_size}), got {self.jitter}"
            )


def at_shape(base: ClipSpec, *, frames: int, crop_size: int, max_stride: int) -> ClipSpec:
    """`base` at another (frames, crop) shape with the largest random stride `max_stride`: a
    multigrid long- or short-cycle shape of a run whose base shape is `base`'s.

    With the "short_side_jitter" crop, the jitter's min scales with the crop and its max stays,
    as PySlowFast does when `MULTIGRID.DEFAULT_S` is set
    (`schedules.multigrid_shapes.jitter_range`): a smaller crop then covers the same share of
    the frame at the smallest scale. At `base`'s own crop the range is unchanged; the other
    crops do not read `jitter`, so it is left as it is.
    """
    shaped = replace(base, frames=frames, crop_size=crop_size, max_stride=max_stride)
    if base.crop != "short_side_jitter":
        return shaped
    return replace(shaped, jitter=jitter_range(base.jitter, crop_size, base.crop_size))


class FrameSource(Protocol):
    """Where one video's pixels come from.

    `length`: positions available (frames for RGB, flows for optical flow). `read(indices)`:
    uint8 (len(indices), H, W, C) at those positions, in the given order (repeats allowed);
    C = 3 for RGB, 2 (x, y) for flow. Raises for anything unreadable (the datasets skip and
    report it).
    """

    @property
    def length(self) -> int: ...

    def read(self, indices: np.ndarray) -> np.ndarray: ...


def frame_indices(
    num_frames: int, spec: ClipSpec, *, rng: np.random.Generator | None, clip_index: int = 0
) -> np.ndarray:
    """The sampled positions of one clip (one per segment or dense step): random for training
    (`rng`), deterministic for evaluation."""
    if spec.sampling == "dense":
        stride = spec.stride
        if rng is not None and spec.max_stride > spec.stride:
            stride = int(rng.integers(spec.stride, spec.max_stride + 1))
        return dense_indices(
            num_frames,
            spec.frames,
            stride,
            rng=rng,
            clip_index=clip_index,
            num_clips=spec.num_clips,
        )
    if rng is None and spec.num_clips > 1:
        # Clip k of K takes the point (k + 1/2) / K of the way through each segment
        # (K = 1 is the segment centre, as `uniform_indices` gives).
        length = num_frames / spec.frames
        where = (clip_index + 0.5) / spec.num_clips
        points = length * (np.arange(spec.frames) + where)
        return np.minimum(np.floor(points), num_frames - 1).astype(np.int64)
    return uniform_indices(num_frames, spec.frames, rng=rng)


def clip_positions(
    length: int, spec: ClipSpec, *, rng: np.random.Generator | None, clip_index: int = 0
) -> np.ndarray:
    """Every position one clip reads, (frames * stack,): for a stack of L, the segment's
    start s is sampled among the `length - L + 1` starts whose stack fits, and s..s+L-1 are
    read (a video with fewer than L flows repeats its last one)."""
    stack = spec.stack
    starts = frame_indices(max(length - stack + 1, 1), spec, rng=rng, clip_index=clip_index)
    if stack == 1:
        return starts
    return np.minimum(starts[:, None] + np.arange(stack), length - 1).reshape(-1)


def stack_channels(pixels: np.ndarray, *, frames: int) -> np.ndarray:
    """(T * L, H, W, C) positions -> (T, H, W, L * C): each segment's stack as channels in
    reading order (x0, y0, x1, y1, ... for flow)."""
    n, h, w, c = pixels.shape
    stack = n // frames
    return (
        pixels.reshape(frames, stack, h, w, c)
        .transpose(0, 2, 3, 1, 4)
        .reshape(frames, h, w, stack * c)
    )


def mirrored_channels(spec: ClipSpec) -> tuple[int, ...]:
    """Channels a horizontal flip negates: the x displacement of each stacked flow."""
    return tuple(range(0, spec.channels, 2)) if spec.modality == "flow" else ()


def make_clip(
    frames_THWC: np.ndarray, spec: ClipSpec, *, train: bool, rng: np.random.Generator
) -> list[torch.Tensor]:
    """Transformed views of one clip's pixels (T, H, W, C): one for training (the crop named by
    `spec.crop`, one box for all frames), `num_crops` for evaluation, each (C, T, H, W) uint8."""
    if train:
        return [_train_view(frames_THWC, spec, rng=rng)]
    return eval_crops(
        frames_THWC, short_side=spec.short_side, size=spec.crop_size, num_crops=spec.num_crops
    )


def _train_view(
    frames_THWC: np.ndarray, spec: ClipSpec, *, rng: np.random.Generator
) -> torch.Tensor:
    match spec.crop:
        case "multiscale":
            return train_transform(
                frames_THWC,
                size=spec.crop_size,
                scales=spec.scales,
                flip=spec.flip,
                rng=rng,
                negate_on_flip=mirrored_channels(spec),
            )
        case "random_resized":
            return random_resized_crop_transform(
                frames_THWC,
                size=spec.crop_size,
                area=spec.area,
                ratio=spec.ratio,
                flip=spec.flip,
                rng=rng,
                negate_on_flip=mirrored_channels(spec),
            )
        case "short_side_jitter":
            return short_side_jitter_transform(
                frames_THWC,
                size=spec.crop_size,
                jitter=spec.jitter,
                inverse_uniform=spec.jitter_sampling == "inverse_uniform",
                flip=spec.flip,
                rng=rng,
                negate_on_flip=mirrored_channels(spec),
            )
    raise ValueError(f"crop must be one of {CROPS}, got {spec.crop!r}")


@dataclass(frozen=True)
class SampledClip:
    """One item's clip (`views`, as `sample_views` returns it) and the source positions each
    of its clips along time read (`clip_positions`, in time order): what a label that depends
    on the clip's time span (Charades' per-clip targets) needs to know."""

    views: torch.Tensor
    positions: tuple[np.ndarray, ...]


def sample_clip(
    source: FrameSource, spec: ClipSpec, *, train: bool, rng: np.random.Generator
) -> SampledClip:
    """One item's clip: (C, T, H, W) for training or a single view, else (V, C, T, H, W) with
    V = num_clips * num_crops (clip-major), with the positions it read. The only function that
    samples clips.

    Training uses `rng` for positions and augmentation; evaluation ignores it.
    """
    views: list[torch.Tensor] = []
    read: list[np.ndarray] = []
    for k in range(1 if train else spec.num_clips):
        positions = clip_positions(source.length, spec, rng=rng if train else None, clip_index=k)
        read.append(positions)
        pixels = stack_channels(source.read(positions), frames=spec.frames)
        views.extend(make_clip(pixels, spec, train=train, rng=rng))
    return SampledClip(views[0] if len(views) == 1 else torch.stack(views), tuple(read))


def sample_views(
    source: FrameSource, spec: ClipSpec, *, train: bool, rng: np.random.Generator
) -> torch.Tensor:
    """`sample_clip`'s views alone."""
    return sample_clip(source, spec, train=train, rng=rng).views


def frame_span(positions: tuple[np.ndarray, ...], modality: Modality) -> tuple[int, int]:
    """The first and last frame a clip's `positions` cover: a position is a frame for RGB, and
    for flow the flow from frame k to k + 1 (so its last frame is one past the position)."""
    first = min(int(p.min()) for p in positions)
    last = max(int(p.max()) for p in positions)
    return first, last + 1 if modality == "flow" else last
