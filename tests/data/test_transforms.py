import numpy as np
import torch

from vidscale.data.transforms import eval_crops, eval_transform, normalize, train_transform


def clip(t: int = 4, h: int = 40, w: int = 60) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(t, h, w, 3), dtype=np.uint8)


def test_train_transform_shape_and_determinism() -> None:
    a = train_transform(clip(), size=32, rng=np.random.default_rng(5))
    b = train_transform(clip(), size=32, rng=np.random.default_rng(5))
    assert a.shape == (3, 4, 32, 32) and a.dtype == torch.uint8
    assert torch.equal(a, b)


def test_flip_off_never_flips() -> None:
    x = clip(h=32, w=32)
    for seed in range(20):
        out = train_transform(
            x, size=32, scales=(1.0,), flip=False, rng=np.random.default_rng(seed)
        )
        assert torch.equal(out, torch.from_numpy(x).permute(3, 0, 1, 2))


def test_flip_on_flips_sometimes() -> None:
    x = clip(h=32, w=32)
    ref = torch.from_numpy(x).permute(3, 0, 1, 2)
    flipped = [
        torch.equal(
            train_transform(x, size=32, scales=(1.0,), rng=np.random.default_rng(s)), ref.flip(-1)
        )
        for s in range(20)
    ]
    assert 0 < sum(flipped) < 20


def test_eval_centre_crop_and_three_crops() -> None:
    x = clip(h=40, w=60)
    out = eval_transform(x, short_side=40, size=32)
    assert out.shape == (3, 4, 32, 32)
    assert torch.equal(out, torch.from_numpy(x).permute(3, 0, 1, 2)[:, :, 4:36, 14:46])
    crops = eval_crops(x, short_side=40, size=32, num_crops=3)
    assert [c.shape for c in crops] == [(3, 4, 32, 32)] * 3
    assert torch.equal(crops[0], torch.from_numpy(x).permute(3, 0, 1, 2)[:, :, 4:36, 0:32])


def test_normalize_on_device() -> None:
    x = torch.full((1, 3, 2, 2, 2), 128, dtype=torch.uint8)
    y = normalize(x, mean=(128.0, 0.0, 128.0), std=(1.0, 128.0, 2.0))
    assert y.dtype == torch.float32
    assert torch.allclose(y[0, :, 0, 0, 0], torch.tensor([0.0, 1.0, 0.0]))
