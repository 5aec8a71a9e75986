import numpy as np
import pytest

from vidscale.data.sampling import dense_indices, uniform_indices


def test_uniform_eval_is_segment_centre_like_the_tsm_code() -> None:
    assert uniform_indices(16, 8, rng=None).tolist() == [1, 3, 5, 7, 9, 11, 13, 15]
    assert uniform_indices(300, 8, rng=None).tolist() == [
        int(37.5 / 2 + 37.5 * k) for k in range(8)
    ]


@pytest.mark.parametrize("n", [8, 9, 17, 100])
def test_uniform_train_one_frame_inside_each_segment(n: int) -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        idx = uniform_indices(n, 8, rng=rng)
        seg = np.floor(np.arange(9) * n / 8).astype(int)
        assert np.all(idx >= seg[:-1]) and np.all(idx < np.maximum(seg[1:], seg[:-1] + 1))


def test_uniform_short_video_repeats_in_order() -> None:
    idx = uniform_indices(3, 8, rng=np.random.default_rng(0))
    assert idx.tolist() == [0, 0, 0, 1, 1, 1, 2, 2]


def test_dense_stride_and_clamp() -> None:
    assert dense_indices(100, 4, 8, rng=None).tolist() == [37, 45, 53, 61]
    assert dense_indices(10, 4, 4, rng=None).tolist() == [0, 4, 8, 9]
    clips = [dense_indices(100, 4, 8, rng=None, clip_index=k, num_clips=3)[0] for k in range(3)]
    assert clips == [0, 38, 75]
    rng = np.random.default_rng(1)
    for _ in range(20):
        idx = dense_indices(50, 8, 2, rng=rng)
        assert np.all(np.diff(idx) == 2) and idx[-1] < 50
