import math
from pathlib import Path

import numpy as np
import pytest

from vidscale.data.annotations import read_class_names
from vidscale.data.layouts import read_layout
from vidscale.data.media.decode import decode_frames, probe
from vidscale.data.sampling import uniform_indices
from vidscale.data.synthetic.videos import (
    CLASSES,
    Trajectory,
    class_trajectory,
    motion_profiles,
    render_video,
    write_synthetic_dataset,
)

N = 64  # supersampled frame side of a 32 px video


def test_layout_and_determinism(tmp_path: Path) -> None:
    small = {"num_frames": 8, "workers": 1}
    a = write_synthetic_dataset(tmp_path / "a", seed=3, train_per_class=1, val_per_class=1, **small)
    # Same seed, more training videos: the videos both have are byte-identical.
    b = write_synthetic_dataset(tmp_path / "b", seed=3, train_per_class=2, val_per_class=1, **small)
    assert (a.train_videos, a.val_videos, b.train_videos) == (8, 8, 16)
    classes = read_class_names(tmp_path / "a" / "classes.txt")
    assert classes == list(CLASSES)
    csv_lines = (tmp_path / "a" / "train.csv").read_text().splitlines()
    assert csv_lines[:2] == [
        "path,label",
        "videos/train/moving_left/moving_left_0000.mp4,moving_left",
    ]
    splits = read_layout("generic", tmp_path / "a")
    assert splits.classes == classes and splits.missing == []
    train, val = splits.train, splits.val
    assert sorted(r.label for r in train) == list(range(8))
    assert all(r.path.parent.parent.name == "val" for r in val)
    for rec in [*train, *val]:
        assert rec.path.parent.name == CLASSES[rec.label]
        twin = tmp_path / "b" / rec.path.relative_to(tmp_path / "a")
        assert rec.path.read_bytes() == twin.read_bytes()
        meta = probe(rec.path)
        assert (meta.num_frames, meta.width, meta.height) == (8, 32, 32)
    long = write_synthetic_dataset(tmp_path / "long", train_per_class=1, val_per_class=0, gop=4)
    meta = probe(tmp_path / "long" / "videos" / "train" / "growing" / "growing_0000.mp4")
    assert long.num_frames == meta.num_frames == 16
    assert max(np.diff([*meta.keyframes.tolist(), 16])) <= 4
    c = write_synthetic_dataset(tmp_path / "c", seed=4, train_per_class=1, val_per_class=0, **small)
    assert c.train_videos == 8
    other = tmp_path / "c" / train[0].path.relative_to(tmp_path / "a")
    assert train[0].path.read_bytes() != other.read_bytes()


def test_ramp_and_vee_visit_the_same_values_at_segment_centres() -> None:
    ramp, vee = motion_profiles(16)
    assert np.all(np.diff(ramp) > 0) and ramp[0] == -0.5 and ramp[-1] == 0.5
    assert vee[0] == vee[-1] == 0.5 and vee.min() == pytest.approx(-13 / 30)
    centres = uniform_indices(16, 8, rng=None)
    np.testing.assert_allclose(np.sort(ramp[centres]), np.sort(vee[centres]), atol=1e-12)


def attributes(t: Trajectory) -> dict[str, np.ndarray]:
    return {
        "x": t.x,
        "y": t.y,
        "angle": t.angle,
        "log_size": np.log(t.half_size),
        "log_gain": np.log(t.gain),
    }


@pytest.mark.parametrize("label", range(8))
def test_only_the_class_attribute_keeps_its_direction(label: int) -> None:
    name = CLASSES[label]
    moving = {
        "moving_left": ("x", -1),
        "moving_right": ("x", 1),
        "moving_up": ("y", -1),
        "moving_down": ("y", 1),
        "brightening": ("log_gain", 1),
        "darkening": ("log_gain", -1),
        "growing": ("log_size", 1),
        "shrinking": ("log_size", -1),
    }[name]
    rng = np.random.default_rng(label)
    for _ in range(20):
        attrs = attributes(class_trajectory(label, 16, N, rng))
        for key, values in attrs.items():
            half = np.sign(values[8] - values[0]), np.sign(values[15] - values[8])
            if key == moving[0]:
                assert half == (moving[1], moving[1]), (name, key)
            else:  # out and back: the two halves cancel
                assert half[0] == -half[1], (name, key)
                assert abs(values[15] - values[0]) < 1.0, (name, key)


def test_without_brightness_the_gain_stays_one_and_nothing_is_drawn_for_it() -> None:
    label = CLASSES.index("growing")
    plain = class_trajectory(label, 16, N, np.random.default_rng(3), brightness=False)
    assert np.all(plain.gain == 1.0)
    # Nothing is drawn for brightness: the generator is left elsewhere than by a trajectory with it.
    rng = np.random.default_rng(3)
    class_trajectory(label, 16, N, rng, brightness=False)
    with_brightness = np.random.default_rng(3)
    class_trajectory(label, 16, N, with_brightness)
    assert rng.uniform() != with_brightness.uniform()
    with pytest.raises(ValueError, match="brightening"):
        class_trajectory(CLASSES.index("brightening"), 16, N, rng, brightness=False)


def test_no_attribute_tells_the_classes_apart_without_order() -> None:
    # Per frame, and per video as a set of values, every attribute has the same distribution in
    # every class: pooled per-frame quantiles and per-video ranges agree across classes. (Over
    # all 16 frames the vee's range is 28/30 of the ramp's: it turns between two frames; the
    # random extents vary by +-17%, which hides that.)
    per_class = []
    for label in range(8):
        rng = np.random.default_rng(100 + label)
        trajs = [attributes(class_trajectory(label, 16, N, rng)) for _ in range(400)]
        stats = {}
        for key in ("x", "y", "angle", "log_size", "log_gain"):
            values = np.stack([t[key] for t in trajs])
            if key == "angle":  # an orientation is only defined modulo a turn
                values = np.mod(values, 2 * math.pi)
            spread = np.ptp(np.stack([t[key] for t in trajs]), axis=1)
            stats[key] = (np.quantile(values, [0.1, 0.5, 0.9]), spread.mean())
        per_class.append(stats)
    scale = {"x": N, "y": N, "angle": 2 * math.pi, "log_size": 1.0, "log_gain": 1.0}
    for stats in per_class[1:]:
        for key, (quantiles, spread) in stats.items():
            ref_quantiles, ref_spread = per_class[0][key]
            assert np.all(np.abs(quantiles - ref_quantiles) < 0.05 * scale[key]), key
            assert spread == pytest.approx(ref_spread, rel=0.1), key


def test_rendered_video_is_deterministic_and_decodes_back(tmp_path: Path) -> None:
    def render() -> np.ndarray:
        rng = np.random.default_rng(7)
        return render_video(2, rng=rng, size=32, num_frames=8, noise=4.0, distractors=2)

    frames = render()
    assert frames.shape == (8, 32, 32, 3) and frames.dtype == np.uint8
    np.testing.assert_array_equal(frames, render())
    write_synthetic_dataset(tmp_path, seed=0, train_per_class=1, val_per_class=0, num_frames=8)
    video = tmp_path / "videos" / "train" / "moving_up" / "moving_up_0000.mp4"
    decoded = decode_frames(video, list(range(8))).astype(int)
    assert decoded.shape == (8, 32, 32, 3) and decoded.std() > 20  # textured, not blank


def test_invalid_sizes() -> None:
    with pytest.raises(ValueError, match="even"):
        write_synthetic_dataset(Path("unused"), size=31)
    with pytest.raises(ValueError, match="num_frames"):
        write_synthetic_dataset(Path("unused"), num_frames=2)
