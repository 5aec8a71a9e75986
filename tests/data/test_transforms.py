import numpy as np
import pytest
import torch

from vidscale.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    eval_crops,
    eval_transform,
    multiscale_crop_box,
    normalize,
    resize,
    three_crop,
    train_transform,
)


def clip(t: int = 4, h: int = 40, w: int = 60) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(t, h, w, 3), dtype=np.uint8)


def as_cthw(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x).permute(3, 0, 1, 2)


def test_train_transform_shape_and_determinism() -> None:
    a = train_transform(clip(), size=32, rng=np.random.default_rng(5))
    b = train_transform(clip(), size=32, rng=np.random.default_rng(5))
    assert a.shape == (3, 4, 32, 32) and a.dtype == torch.uint8 and a.is_contiguous()
    assert torch.equal(a, b)
    outputs = {
        train_transform(clip(), size=32, rng=np.random.default_rng(s)).numpy().tobytes()
        for s in range(10)
    }
    assert len(outputs) > 1


def test_same_box_for_every_frame() -> None:
    frame = clip(t=1)
    out = train_transform(np.repeat(frame, 3, axis=0), size=24, rng=np.random.default_rng(2))
    assert torch.equal(out[:, 0], out[:, 1]) and torch.equal(out[:, 0], out[:, 2])


def test_crop_boxes_follow_the_tsm_multiscale_crop() -> None:
    # Image 60 x 40 (w x h), short side 40: sides int(40 * s) for the scales, at most one scale
    # step apart, placed on the 13 positions of a 4 x 4 grid of steps (no side is within 2 px
    # of the output size 100, so none snaps to it).
    scales = (1.0, 0.875, 0.75, 0.66)
    sides = [40, 35, 30, 26]
    pairs = {(sides[j], sides[i]) for i in range(4) for j in range(4) if abs(i - j) <= 1}
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(400):
        box = multiscale_crop_box(40, 60, size=100, scales=scales, max_distort=1, rng=rng)
        assert (box.width, box.height) in pairs
        w_step, h_step = (60 - box.width) // 4, (40 - box.height) // 4
        assert box.x % max(w_step, 1) == 0 and box.x <= 4 * w_step
        assert box.y % max(h_step, 1) == 0 and box.y <= 4 * h_step
        seen.add((box.width, box.height))
    assert seen == pairs


def test_crop_side_within_two_pixels_of_the_output_snaps_to_it() -> None:
    box = multiscale_crop_box(
        33, 33, size=32, scales=(1.0,), max_distort=0, rng=np.random.default_rng(0)
    )
    assert (box.width, box.height) == (32, 32)


def test_flip_off_never_flips() -> None:
    x = clip(h=32, w=32)
    for seed in range(20):
        out = train_transform(
            x, size=32, scales=(1.0,), flip=False, rng=np.random.default_rng(seed)
        )
        assert torch.equal(out, as_cthw(x))


def test_flip_on_flips_sometimes() -> None:
    x = clip(h=32, w=32)
    flipped = [
        torch.equal(
            train_transform(x, size=32, scales=(1.0,), rng=np.random.default_rng(s)),
            as_cthw(x).flip(-1),
        )
        for s in range(20)
    ]
    assert 0 < sum(flipped) < 20


def test_resize_keeps_constant_images_and_rounds() -> None:
    x = torch.full((2, 3, 40, 60), 77, dtype=torch.uint8)
    for h, w in [(20, 30), (80, 120), (33, 17)]:
        out = resize(x, h, w)
        assert out.shape == (2, 3, h, w) and out.dtype == torch.uint8
        assert torch.all(out == 77)


def test_eval_centre_crop() -> None:
    x = clip(h=40, w=60)
    out = eval_transform(x, short_side=40, size=32)
    assert out.shape == (3, 4, 32, 32)
    assert torch.equal(out, as_cthw(x)[:, :, 4:36, 14:46])
    small = eval_transform(x, short_side=20, size=16)  # 40 x 60 -> 20 x 30, then the crop
    assert small.shape == (3, 4, 16, 16)


def test_three_crops_along_the_long_side() -> None:
    landscape = clip(h=40, w=60)
    crops = three_crop(landscape, short_side=40, size=32)
    full = as_cthw(landscape)
    assert torch.equal(crops[0], full[:, :, 4:36, 0:32])
    assert torch.equal(crops[1], full[:, :, 4:36, 14:46])
    assert torch.equal(crops[2], full[:, :, 4:36, 28:60])
    portrait = clip(h=60, w=40)
    crops = three_crop(portrait, short_side=40, size=40)
    full = as_cthw(portrait)
    assert [c.shape for c in crops] == [(3, 4, 40, 40)] * 3
    assert torch.equal(crops[0], full[:, :, 0:40]) and torch.equal(crops[2], full[:, :, 20:60])
    assert len(eval_crops(landscape, short_side=40, size=32, num_crops=3)) == 3
    with pytest.raises(ValueError, match="num_crops"):
        eval_crops(landscape, short_side=40, size=32, num_crops=2)


def test_normalize_on_the_clips_device_and_dtype() -> None:
    x = torch.full((1, 3, 2, 2, 2), 128, dtype=torch.uint8)
    y = normalize(x, mean=(128.0, 0.0, 128.0), std=(1.0, 128.0, 2.0))
    assert y.dtype == torch.float32 and y.device == x.device
    assert torch.allclose(y[0, :, 0, 0, 0], torch.tensor([0.0, 1.0, 0.0]))
    z = normalize(x, dtype=torch.float64)
    expected = [(128 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True)]
    assert z.dtype == torch.float64
    assert torch.allclose(z[0, :, 1, 1, 1], torch.tensor(expected, dtype=torch.float64))
    with pytest.raises(ValueError, match="channel"):
        normalize(torch.zeros(1, 2, 1, 1, 1, dtype=torch.uint8))


def test_rejects_wrong_layout() -> None:
    with pytest.raises(ValueError, match="uint8"):
        train_transform(clip().astype(np.float32), size=8, rng=np.random.default_rng(0))
