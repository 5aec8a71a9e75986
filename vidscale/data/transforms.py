"""Clip transforms as tensor ops on uint8 frames (no torchvision).

Input clips are (T, H, W, C) uint8 (as decoded); outputs are (C, T, H, W) uint8, the layout
models take. Normalisation to float happens on the device (`normalize`), so workers move 4x
fewer bytes and the host never holds float clips.

Training: the TSM code's multi-scale crop (GroupMultiScaleCrop: crop width and height chosen
independently from `scales` x short side, at most `max_distort` scale steps apart, placed at one
of 13 fixed positions), or the ImageNet random-resized crop (Szegedy et al., "Going Deeper with
Convolutions", 2015, §6: a box of 8%-100% of the image area with aspect ratio in [3/4, 4/3];
torchvision's RandomResizedCrop), resized to size x size, or PySlowFast's short-side scale
jitter (the frame resized to a random short side, then a random size x size square), and a
horizontal flip. Evaluation: resize the short side, then centre crop (or three crops for
multi-view testing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

IMAGENET_MEAN = (123.675, 116.28, 103.53)  # 0..255 scale
IMAGENET_STD = (58.395, 57.12, 57.375)
# The same statistics on the 0..1 scale, RGB order: the form a run's `data.mean`/`data.std`
# take (torchvision's ImageNet normalisation; MMAction2's and the TSM code's).
IMAGENET_RGB_MEAN = (0.485, 0.456, 0.406)
IMAGENET_RGB_STD = (0.229, 0.224, 0.225)


def to_tensor(clip: np.ndarray | torch.Tensor) -> torch.Tensor:
    """(T, H, W, C) uint8 array -> (T, C, H, W) uint8 tensor (a view where possible)."""
    t = torch.from_numpy(np.ascontiguousarray(clip)) if isinstance(clip, np.ndarray) else clip
    if t.dtype != torch.uint8 or t.ndim != 4:
        raise ValueError(f"expected a (T, H, W, C) uint8 clip, got {tuple(t.shape)} {t.dtype}")
    return t.permute(0, 3, 1, 2)


def resize(frames_TCHW: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bilinear resize of uint8 frames, rounded back to uint8.

    Antialiased like PIL's bilinear resize (which the TSM code uses), so shrinking a
    high-resolution video does not alias; enlarging is plain bilinear either way.
    """
    if frames_TCHW.shape[-2:] == (height, width):
        return frames_TCHW
    out = F.interpolate(
        frames_TCHW.float(),
        size=(height, width),
        mode="bilinear",
        align_corners=False,
        antialias=True,
    )
    return out.round_().clamp_(0, 255).to(torch.uint8)


def _crop_offsets(image_w: int, image_h: int, crop_w: int, crop_h: int) -> list[tuple[int, int]]:
    """The TSM code's 13 'more fix crop' positions: grid corners, centre, edges and quarters."""
    w_step = (image_w - crop_w) // 4
    h_step = (image_h - crop_h) // 4
    steps = [(0, 0), (4, 0), (0, 4), (4, 4), (2, 2)]
    steps += [(0, 2), (4, 2), (2, 4), (2, 0), (1, 1), (3, 1), (1, 3), (3, 3)]
    return [(i * w_step, j * h_step) for i, j in steps]


@dataclass(frozen=True)
class CropBox:
    x: int
    y: int
    width: int
    height: int


def multiscale_crop_box(
    height: int,
    width: int,
    *,
    size: int,
    scales: Sequence[float],
    max_distort: int,
    rng: np.random.Generator,
) -> CropBox:
    """A GroupMultiScaleCrop box (TSM code, ops/transforms.py) for an image of height x width.

    Crop sides are `scales` x the short side (snapped to `size` when within 2 px); width and
    height are drawn as a pair at most `max_distort` scale steps apart, then the box is placed at
    one of the 13 fixed positions.
    """
    base = min(height, width)
    sizes = [int(base * s) for s in scales]
    sizes = [size if abs(s - size) < 3 else s for s in sizes]
    pairs = [
        (w, h)
        for i, h in enumerate(sizes)
        for j, w in enumerate(sizes)
        if abs(i - j) <= max_distort
    ]
    crop_w, crop_h = pairs[int(rng.integers(len(pairs)))]
    crop_w, crop_h = min(crop_w, width), min(crop_h, height)
    offsets = _crop_offsets(width, height, crop_w, crop_h)
    x, y = offsets[int(rng.integers(len(offsets)))]
    return CropBox(x, y, crop_w, crop_h)


RANDOM_RESIZED_ATTEMPTS = 10  # torchvision RandomResizedCrop's tries before the fallback


def random_resized_crop_box(
    height: int,
    width: int,
    *,
    area: tuple[float, float],
    ratio: tuple[float, float],
    rng: np.random.Generator,
) -> CropBox:
    """A random-resized-crop box (Szegedy et al. 2015 §6; torchvision RandomResizedCrop) for an
    image of height x width.

    Up to 10 attempts draw a target area uniformly from `area` x (height x width) and an aspect
    ratio w/h log-uniformly from `ratio`; sides are the rounded sqrt(area x ratio) and
    sqrt(area / ratio), and the first box that fits is placed uniformly at random. If none fits,
    the fallback is a centre crop of the whole image clamped to the ratio range (its short side
    shrunk to the nearest allowed aspect), drawing nothing more from `rng`.
    """
    _check_range("area", area, low=0.0, high=1.0)
    _check_range("ratio", ratio, low=0.0, high=math.inf)
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(RANDOM_RESIZED_ATTEMPTS):
        target = height * width * rng.uniform(area[0], area[1])
        aspect = math.exp(rng.uniform(log_low, log_high))
        crop_w = round(math.sqrt(target * aspect))
        crop_h = round(math.sqrt(target / aspect))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            y = int(rng.integers(height - crop_h + 1))
            x = int(rng.integers(width - crop_w + 1))
            return CropBox(x, y, crop_w, crop_h)
    return _centre_box_within_ratio(height, width, ratio=ratio)


def _centre_box_within_ratio(height: int, width: int, *, ratio: tuple[float, float]) -> CropBox:
    crop_w, crop_h = width, height
    if width / height < ratio[0]:
        crop_h = max(1, round(width / ratio[0]))
    elif width / height > ratio[1]:
        crop_w = max(1, round(height * ratio[1]))
    return CropBox((width - crop_w) // 2, (height - crop_h) // 2, crop_w, crop_h)


def _check_range(name: str, bounds: tuple[float, float], *, low: float, high: float) -> None:
    lo, hi = bounds
    if not (low < lo <= hi <= high):
        raise ValueError(f"{name} must satisfy {low:g} < min <= max <= {high:g}, got {bounds}")


def train_transform(
    clip: np.ndarray | torch.Tensor,
    *,
    size: int,
    scales: Sequence[float] = (1.0, 0.875, 0.75, 0.66),
    max_distort: int = 1,
    flip: bool = True,
    rng: np.random.Generator,
    negate_on_flip: Sequence[int] = (),
) -> torch.Tensor:
    """Multi-scale crop, resize to size x size, and (if `flip`) a horizontal flip with p = 1/2:
    (T, H, W, C) uint8 -> (C, T, H, W) uint8, the same box for every frame; a pure function of
    the clip and `rng`'s state. Turn `flip` off where left/right is part of the label.

    A flip also negates the channels `negate_on_flip` (the x displacement of optical flow
    stored around 127.5: v -> 255 - v), since mirroring the image reverses horizontal motion.
    """
    frames = to_tensor(clip)
    _, _, h, w = frames.shape
    box = multiscale_crop_box(h, w, size=size, scales=scales, max_distort=max_distort, rng=rng)
    return _crop_resize_flip(
        frames, box, size=size, flip=flip, rng=rng, negate_on_flip=negate_on_flip
    )


def random_resized_crop_transform(
    clip: np.ndarray | torch.Tensor,
    *,
    size: int,
    area: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = True,
    rng: np.random.Generator,
    negate_on_flip: Sequence[int] = (),
) -> torch.Tensor:
    """The ImageNet training augmentation: a `random_resized_crop_box`, resized to size x size,
    and (if `flip`) a horizontal flip with p = 1/2: (T, H, W, C) uint8 -> (C, T, H, W) uint8.

    Defaults are Szegedy et al.'s (area 8%-100%, aspect 3/4-4/3), the crop of Goyal et al. and of
    You et al.'s LARS ImageNet runs. One box serves every frame (an image is T = 1); a pure
    function of the clip and `rng`'s state; `negate_on_flip` as in `train_transform`.
    """
    frames = to_tensor(clip)
    _, _, h, w = frames.shape
    box = random_resized_crop_box(h, w, area=area, ratio=ratio, rng=rng)
    return _crop_resize_flip(
        frames, box, size=size, flip=flip, rng=rng, negate_on_flip=negate_on_flip
    )


def jittered_short_side(
    jitter: tuple[int, int], *, inverse_uniform: bool, rng: np.random.Generator
) -> int:
    """A short side in [min, max] of `jitter`: PySlowFast `random_short_side_scale_jitter`'s
    `int(round(uniform(min, max)))`, or with `inverse_uniform` `int(round(1 / uniform(1 / max,
    1 / min)))` (smaller sides likelier). One draw from `rng`."""
    low, high = jitter
    if not 0 < low <= high:
        raise ValueError(f"jitter must satisfy 0 < min <= max, got {jitter}")
    if inverse_uniform:
        return round(1.0 / rng.uniform(1.0 / high, 1.0 / low))
    return round(rng.uniform(low, high))


def short_side_jitter_box(
    height: int, width: int, *, size: int, rng: np.random.Generator
) -> CropBox:
    """A size x size box at a random place in a height x width frame (PySlowFast `random_crop`:
    the top offset drawn first, then the left one, each from `randint(0, side - size)`, whose
    exclusive bound leaves out the last offset; 0 where the side equals `size`)."""
    if min(height, width) < size:
        raise ValueError(f"a {height} x {width} frame cannot hold a {size} x {size} crop")
    y = int(rng.integers(0, height - size)) if height > size else 0
    x = int(rng.integers(0, width - size)) if width > size else 0
    return CropBox(x, y, size, size)


def short_side_jitter_transform(
    clip: np.ndarray | torch.Tensor,
    *,
    size: int,
    jitter: tuple[int, int] = (256, 320),
    inverse_uniform: bool = False,
    flip: bool = True,
    rng: np.random.Generator,
    negate_on_flip: Sequence[int] = (),
) -> torch.Tensor:
    """PySlowFast's training augmentation (`utils.spatial_sampling` with no relative scales):
    resize the frames so the short side is `jittered_short_side` (the long side floored, as
    PySlowFast does), cut a `short_side_jitter_box`, and (if `flip`) flip with p = 1/2:
    (T, H, W, C) uint8 -> (C, T, size, size) uint8, one box for every frame.

    A pure function of the clip and `rng`'s state (draws: the side, the top and left offsets,
    then the flip); `negate_on_flip` as in `train_transform`. `jitter` min must be >= `size`.
    """
    frames = to_tensor(clip)
    _, _, h, w = frames.shape
    side = jittered_short_side(jitter, inverse_uniform=inverse_uniform, rng=rng)
    if w < h:
        frames = resize(frames, math.floor(h / w * side), side)
    else:
        frames = resize(frames, side, math.floor(w / h * side))
    _, _, h, w = frames.shape
    box = short_side_jitter_box(h, w, size=size, rng=rng)
    return _crop_resize_flip(
        frames, box, size=size, flip=flip, rng=rng, negate_on_flip=negate_on_flip
    )


def _crop_resize_flip(
    frames_TCHW: torch.Tensor,
    box: CropBox,
    *,
    size: int,
    flip: bool,
    rng: np.random.Generator,
    negate_on_flip: Sequence[int],
) -> torch.Tensor:
    """Cut `box`, resize to size x size, flip with p = 1/2 (one draw from `rng` when `flip`):
    the shared tail of the training transforms, returned as a contiguous (C, T, H, W) clip."""
    frames = frames_TCHW[:, :, box.y : box.y + box.height, box.x : box.x + box.width]
    frames = resize(frames, size, size)
    if flip and rng.random() < 0.5:
        frames = frames.flip(-1)
        if negate_on_flip:
            x = list(negate_on_flip)
            frames[:, x] = 255 - frames[:, x]
    return frames.permute(1, 0, 2, 3).contiguous()


def resize_short_side(frames_TCHW: torch.Tensor, short_side: int) -> torch.Tensor:
    """Resize so the shorter side is `short_side`, keeping the aspect ratio."""
    _, _, h, w = frames_TCHW.shape
    if h <= w:
        return resize(frames_TCHW, short_side, max(1, round(w * short_side / h)))
    return resize(frames_TCHW, max(1, round(h * short_side / w)), short_side)


def eval_transform(clip: np.ndarray | torch.Tensor, *, short_side: int, size: int) -> torch.Tensor:
    """Resize the short side to `short_side`, then centre crop size x size: (C, T, H, W)."""
    frames = resize_short_side(to_tensor(clip), short_side)
    _, _, h, w = frames.shape
    return _crop(frames, (h - min(size, h)) // 2, (w - min(size, w)) // 2, size)


def three_crop(
    clip: np.ndarray | torch.Tensor, *, short_side: int, size: int
) -> list[torch.Tensor]:
    """Three size x size crops after resizing the short side: start, centre and end of the long
    side (left/centre/right for landscape video, top/centre/bottom for portrait). The TSM code's
    multi-view test (GroupFullResSample) uses size = short_side, so the crops cover the frame."""
    frames = resize_short_side(to_tensor(clip), short_side)
    _, _, h, w = frames.shape
    size_h, size_w = min(size, h), min(size, w)
    y, x = (h - size_h) // 2, (w - size_w) // 2
    along_width = [(y, 0), (y, x), (y, w - size_w)]
    along_height = [(0, x), (y, x), (h - size_h, x)]
    return [
        _crop(frames, top, left, size) for top, left in (along_width if w >= h else along_height)
    ]


def eval_crops(
    clip: np.ndarray | torch.Tensor, *, short_side: int, size: int, num_crops: int
) -> list[torch.Tensor]:
    """1 (centre) or 3 (`three_crop`) evaluation views, each (C, T, H, W)."""
    if num_crops == 1:
        return [eval_transform(clip, short_side=short_side, size=size)]
    if num_crops == 3:
        return three_crop(clip, short_side=short_side, size=size)
    raise ValueError(f"num_crops must be 1 or 3, got {num_crops}")


def _crop(frames_TCHW: torch.Tensor, top: int, left: int, size: int) -> torch.Tensor:
    """A size x size (or smaller, at the border) crop as a contiguous (C, T, H, W) clip."""
    box = frames_TCHW[:, :, top : top + size, left : left + size]
    return box.permute(1, 0, 2, 3).contiguous()


def on_255(values: Sequence[float]) -> tuple[float, ...]:
    """0..1-scale statistics on the 0..255 scale of uint8 pixels, rounded to 1e-9 so that a
    decimal keeps its decimal value (0.224 x 255 is 57.12, not 57.120000000000005): ImageNet's
    0..1 statistics give exactly `IMAGENET_MEAN`/`IMAGENET_STD`."""
    return tuple(round(v * 255, 9) for v in values)


def input_normalization(
    modality: str,
    channels: int,
    *,
    rgb_mean: Sequence[float] = IMAGENET_RGB_MEAN,
    rgb_std: Sequence[float] = IMAGENET_RGB_STD,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean and std (0..255 scale) an input is normalised with: for RGB `rgb_mean`/`rgb_std`
    (0..1 scale, RGB order; ImageNet's unless the run says otherwise, `DataConfig.mean`); 127.5
    for every channel of stacked optical flow, so a quantised flow maps to its displacement
    over the quantisation bound, in [-1, 1]."""
    if modality == "rgb":
        if channels != 3:
            raise ValueError(f"an RGB input has 3 channels, not {channels}")
        return on_255(rgb_mean), on_255(rgb_std)
    if modality == "flow":
        return (127.5,) * channels, (127.5,) * channels
    raise ValueError(f"unknown input modality {modality!r}")


def normalize(
    clips: torch.Tensor,
    *,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """uint8 (N, C, T, H, W) -> float (x - mean) / std per channel, on the clips' device.

    Mean and std are on the 0..255 scale of the uint8 input (`IMAGENET_MEAN`, `IMAGENET_STD`).
    """
    if clips.ndim != 5 or clips.shape[1] != len(mean) or len(mean) != len(std):
        raise ValueError(
            f"expected (N, {len(mean)}, T, H, W) clips for {len(mean)} channel means, "
            f"got {tuple(clips.shape)}"
        )
    shape = (1, -1, 1, 1, 1)
    m = torch.tensor(mean, dtype=dtype, device=clips.device).view(shape)
    s = torch.tensor(std, dtype=dtype, device=clips.device).view(shape)
    return (clips.to(dtype) - m) / s
