"""PySlowFast's short-side scale jitter: the drawn sides, the square crop inside the resized
frame, the flip, the dispatch from `ClipSpec.crop`, the checks, and the multigrid scaling."""

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest
import torch

from vidscale.config import ConfigError, apply_overrides, resolve
from vidscale.data.clip import ClipSpec, at_shape, make_clip
from vidscale.data.transforms import (
    eval_crops,
    jittered_short_side,
    resize,
    short_side_jitter_box,
    short_side_jitter_transform,
    to_tensor,
)
from vidscale.recipes import get_recipe

JITTER_SPEC = ClipSpec(frames=2, crop_size=24, crop="short_side_jitter", jitter=(28, 36))


def clip(t: int = 2, h: int = 30, w: int = 40, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(t, h, w, 3), dtype=np.uint8)


def test_uniform_draws_cover_exactly_the_range_with_half_weight_ends() -> None:
    # round(uniform(20, 30)): every integer of [20, 30] and no other; the ends collect half an
    # interval of the uniform each (PySlowFast's `int(round(np.random.uniform(min, max)))`).
    rng = np.random.default_rng(0)
    n = 20_000
    counts = Counter(
        jittered_short_side((20, 30), inverse_uniform=False, rng=rng) for _ in range(n)
    )
    assert set(counts) == set(range(20, 31))
    for side, count in counts.items():
        share = (0.5 if side in (20, 30) else 1.0) / 10
        assert count / n == pytest.approx(share, abs=0.01), side


def test_inverse_uniform_draws_follow_the_reciprocal_of_a_uniform() -> None:
    # 1 / u with u uniform on [1/40, 1/20]: side k has the share of u rounding to it, the width
    # of (1 / (k + 1/2), 1 / (k - 1/2)) clipped to the interval, over the interval's width.
    rng = np.random.default_rng(1)
    n = 20_000
    counts = Counter(jittered_short_side((20, 40), inverse_uniform=True, rng=rng) for _ in range(n))
    assert set(counts) == set(range(20, 41))
    low, high = 1 / 40, 1 / 20
    for side, count in counts.items():
        width = min(1 / (side - 0.5), high) - max(1 / (side + 0.5), low)
        assert count / n == pytest.approx(width / (high - low), abs=0.01), side
    assert counts[21] > 3 * counts[39]  # small sides likelier: density 1 / k^2, (39 / 21)^2 = 3.4


def test_a_one_value_range_always_gives_that_side() -> None:
    rng = np.random.default_rng(2)
    for inverse in (False, True):
        assert {
            jittered_short_side((25, 25), inverse_uniform=inverse, rng=rng) for _ in range(50)
        } == {25}


def test_boxes_are_squares_inside_the_frame_at_pyslowfasts_offsets() -> None:
    rng = np.random.default_rng(3)
    boxes = [short_side_jitter_box(30, 40, size=24, rng=rng) for _ in range(3000)]
    assert {(b.width, b.height) for b in boxes} == {(24, 24)}
    # randint(0, side - size): offsets 0 .. side - size - 1, the last one never drawn.
    assert {b.y for b in boxes} == set(range(30 - 24))
    assert {b.x for b in boxes} == set(range(40 - 24))
    # A side equal to the crop has the one offset 0; a smaller side cannot hold the crop.
    assert {short_side_jitter_box(24, 40, size=24, rng=rng).y for _ in range(20)} == {0}
    with pytest.raises(ValueError, match="cannot hold"):
        short_side_jitter_box(23, 40, size=24, rng=rng)


@pytest.mark.parametrize(("h", "w"), [(30, 40), (40, 30), (32, 32)])
def test_output_is_a_crop_of_the_resized_frames_then_a_flip(h: int, w: int) -> None:
    pixels = clip(h=h, w=w)
    flips = 0
    for seed in range(30):
        rng, replay = np.random.default_rng(seed), np.random.default_rng(seed)
        got = short_side_jitter_transform(pixels, size=24, jitter=(28, 36), rng=rng)
        assert got.shape == (3, 2, 24, 24) and got.dtype == torch.uint8 and got.is_contiguous()
        side = jittered_short_side((28, 36), inverse_uniform=False, rng=replay)
        # The short side becomes `side`, the long one floor(long / short x side) (PySlowFast).
        new_h = side if h <= w else math.floor(h / w * side)
        new_w = side if w < h else math.floor(w / h * side)
        frames = resize(to_tensor(pixels), new_h, new_w)
        box = short_side_jitter_box(new_h, new_w, size=24, rng=replay)
        assert box.x + 24 <= new_w and box.y + 24 <= new_h
        expected = frames[:, :, box.y : box.y + 24, box.x : box.x + 24]
        flipped = replay.random() < 0.5
        if flipped:
            expected = expected.flip(-1)
        assert torch.equal(got, expected.permute(1, 0, 2, 3))
        flips += flipped
    assert 5 < flips < 25
    assert rng.random() == replay.random()  # the transform drew exactly side, y, x and flip


def test_flip_off_never_mirrors_and_flow_x_is_negated_on_a_flip() -> None:
    pixels = clip(t=1)
    seen = set()
    for seed in range(16):
        kept = short_side_jitter_transform(
            pixels, size=24, jitter=(28, 36), flip=False, rng=np.random.default_rng(seed)
        )
        plain = short_side_jitter_transform(
            pixels, size=24, jitter=(28, 36), rng=np.random.default_rng(seed)
        )
        negated = short_side_jitter_transform(
            pixels, size=24, jitter=(28, 36), rng=np.random.default_rng(seed), negate_on_flip=(0,)
        )
        flipped = not torch.equal(plain, kept)
        if flipped:
            assert torch.equal(plain, kept.flip(-1))
            assert torch.equal(negated[0], 255 - plain[0]) and torch.equal(negated[1:], plain[1:])
        else:
            assert torch.equal(negated, plain)
        seen.add(flipped)
    assert seen == {True, False}


def test_transform_is_deterministic_in_the_rng_and_refuses_float_clips() -> None:
    a = short_side_jitter_transform(clip(), size=24, jitter=(28, 36), rng=np.random.default_rng(5))
    b = short_side_jitter_transform(clip(), size=24, jitter=(28, 36), rng=np.random.default_rng(5))
    assert torch.equal(a, b)
    outs = {
        short_side_jitter_transform(clip(), size=24, jitter=(28, 36), rng=np.random.default_rng(s))
        .numpy()
        .tobytes()
        for s in range(8)
    }
    assert len(outs) == 8
    with pytest.raises(ValueError, match="uint8"):
        short_side_jitter_transform(
            clip().astype(np.float32), size=24, rng=np.random.default_rng(0)
        )


def test_make_clip_dispatches_to_the_jitter_with_the_specs_settings() -> None:
    pixels = clip(t=2)
    spec = dataclasses.replace(JITTER_SPEC, jitter_sampling="inverse_uniform", flip=False)
    (got,) = make_clip(pixels, spec, train=True, rng=np.random.default_rng(7))
    want = short_side_jitter_transform(
        pixels,
        size=24,
        jitter=(28, 36),
        inverse_uniform=True,
        flip=False,
        rng=np.random.default_rng(7),
    )
    assert torch.equal(got, want)
    # Evaluation ignores the training crop: short-side resize, then the centre crop.
    assert torch.equal(
        make_clip(pixels, spec, train=False, rng=np.random.default_rng(0))[0],
        eval_crops(pixels, short_side=spec.short_side, size=24, num_crops=1)[0],
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"jitter": (0, 30)}, r"jitter must satisfy 0 < min <= max"),
        ({"jitter": (36, 28)}, r"jitter must satisfy 0 < min <= max"),
        ({"jitter": (20, 36)}, r"jitter min must be >= crop_size \(24\)"),
        ({"jitter_sampling": "log"}, r"jitter_sampling must be one of"),
    ],
)
def test_bad_jitter_settings_are_named(change: dict[str, object], message: str) -> None:
    JITTER_SPEC.check("data.train_clip")
    spec = dataclasses.replace(JITTER_SPEC, **change)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"^data.train_clip.{message}"):
        spec.check("data.train_clip")


def test_a_jitter_below_the_crop_is_only_refused_where_the_jitter_crops() -> None:
    dataclasses.replace(JITTER_SPEC, crop="multiscale", jitter=(8, 36)).check("data.train_clip")


def test_bad_jitter_from_the_command_line_is_a_one_line_config_error() -> None:
    cfg = get_recipe("slowfast_r50_ssv2_16x8_multigrid_b128_e22")
    with pytest.raises(ConfigError, match=r"^data.train_clip.jitter min must be >= crop_size"):
        resolve(cfg, ["data.train_clip.jitter=[200, 320]"])
    with pytest.raises(ConfigError, match="data.train_clip.jitter: expected 2 values"):
        apply_overrides(cfg, ["data.train_clip.jitter=[256]"])
    with pytest.raises(ConfigError, match="data.train_clip.jitter_sampling"):
        apply_overrides(cfg, ["data.train_clip.jitter_sampling=log"])


# PySlowFast (datasets/kinetics.py, ssv2.py, charades.py, with MULTIGRID.DEFAULT_S = S0):
#     min_scale = int(round(float(min_scale) * crop_size / DEFAULT_S)); max_scale unchanged.
# The K400 / SSv2 schedules' crops at S0 = 224: 112 (short cycle 1/2), 158 (1/sqrt2), 224.
#     256 * 112 / 224 = 128;  256 * 158 / 224 = 180.57 -> 181;  256 * 224 / 224 = 256.
# Charades' [256, 340] scales its min the same way. A halfway case rounds to even as Python's
# round does: 300 * 101 / 200 = 151.5 -> 152, 300 * 99 / 200 = 148.5 -> 148.
@pytest.mark.parametrize(
    ("jitter", "base", "crop", "expected"),
    [
        ((256, 320), 224, 112, (128, 320)),
        ((256, 320), 224, 158, (181, 320)),
        ((256, 320), 224, 224, (256, 320)),
        ((256, 340), 224, 112, (128, 340)),
        ((256, 340), 224, 158, (181, 340)),
        ((300, 400), 200, 101, (152, 400)),
        ((300, 400), 200, 99, (148, 400)),
    ],
)
def test_a_multigrid_shape_scales_the_jitters_min_only(
    jitter: tuple[int, int], base: int, crop: int, expected: tuple[int, int]
) -> None:
    spec = ClipSpec(crop_size=base, crop="short_side_jitter", jitter=jitter)
    shaped = at_shape(spec, frames=4, crop_size=crop, max_stride=3)
    assert shaped.jitter == expected
    assert (shaped.frames, shaped.crop_size, shaped.max_stride) == (4, crop, 3)
    assert (
        dataclasses.replace(shaped, frames=8, crop_size=base, max_stride=0, jitter=jitter) == spec
    )
    shaped.check("data.train_clip")  # a min >= the base crop stays >= every scaled crop


def test_other_crops_keep_their_unused_jitter_at_every_shape() -> None:
    spec = ClipSpec(crop_size=224)
    assert at_shape(spec, frames=4, crop_size=112, max_stride=0).jitter == spec.jitter
