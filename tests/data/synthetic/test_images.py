"""The image demo set: real JPEGs in the imagefolder layout, deterministic in the seed, whose
classes a linear model on pixels barely separates while translation-invariant features do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vidscale.data.layouts import read_layout
from vidscale.data.prepared.shards import decode_jpeg
from vidscale.data.synthetic.images import CLASSES, write_synthetic_images


def snapshot(directory: Path) -> dict[str, bytes]:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {str(p.relative_to(directory)): p.read_bytes() for p in files}


def test_layout_counts_and_image_size(tmp_path: Path) -> None:
    summary = write_synthetic_images(tmp_path, train_per_class=3, val_per_class=2, size=24)
    assert (summary.train_images, summary.val_images, summary.classes) == (30, 20, 10)
    splits = read_layout("imagefolder", tmp_path)
    assert splits.classes == list(CLASSES) and len(CLASSES) == 10
    assert (len(splits.train), len(splits.val)) == (30, 20)
    for record in splits.train + splits.val:
        assert record.path.suffix == ".jpg"
        assert splits.classes[record.label] == record.path.parent.name
        assert decode_jpeg(record.path.read_bytes()).shape == (24, 24, 3)


def test_same_seed_same_bytes_and_more_images_keep_the_others(tmp_path: Path) -> None:
    write_synthetic_images(tmp_path / "a", seed=3, train_per_class=2, val_per_class=1)
    write_synthetic_images(tmp_path / "b", seed=3, train_per_class=2, val_per_class=1)
    write_synthetic_images(tmp_path / "c", seed=4, train_per_class=2, val_per_class=1)
    write_synthetic_images(tmp_path / "d", seed=3, train_per_class=3, val_per_class=1)
    a, c, d = snapshot(tmp_path / "a"), snapshot(tmp_path / "c"), snapshot(tmp_path / "d")
    assert a == snapshot(tmp_path / "b")
    assert a.keys() == c.keys() and all(a[k] != c[k] for k in a)
    assert {k: d[k] for k in a} == a and len(d) == len(a) + 10


def test_size_below_the_minimum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size must be >= 16"):
        write_synthetic_images(tmp_path, size=8)


def ridge_accuracy(
    train: np.ndarray, y_train: np.ndarray, val: np.ndarray, y_val: np.ndarray
) -> float:
    """Validation accuracy of a one-vs-rest ridge classifier on standardised features."""
    mean, std = train.mean(0), train.std(0) + 1e-6
    a, b = (train - mean) / std, (val - mean) / std
    targets = np.eye(len(CLASSES))[y_train] * 2 - 1
    # The dual form (a.T (a a.T + l I)^-1 equals (a.T a + l I)^-1 a.T): fewer images than features.
    weights = a.T @ np.linalg.solve(a @ a.T + 1000.0 * np.eye(len(a)), targets)
    return float(((b @ weights).argmax(1) == y_val).mean())


@pytest.mark.slow
def test_pixels_do_not_give_the_class_away_but_the_images_hold_it(tmp_path: Path) -> None:
    write_synthetic_images(tmp_path, seed=0, train_per_class=64, val_per_class=32)
    splits = read_layout("imagefolder", tmp_path)

    def load(records: list) -> tuple[np.ndarray, np.ndarray]:
        images = np.stack([decode_jpeg(r.path.read_bytes()) for r in records]).astype(np.float64)
        return images, np.array([r.label for r in records])

    (train, y_train), (val, y_val) = load(splits.train), load(splits.val)
    flat = ridge_accuracy(train.reshape(len(train), -1), y_train, val.reshape(len(val), -1), y_val)

    def spectrum(images: np.ndarray) -> np.ndarray:
        """Log amplitude spectrum of the luma: blind to where the object is."""
        luma = images @ np.array([0.299, 0.587, 0.114])
        luma -= luma.mean(axis=(1, 2), keepdims=True)
        return np.log1p(np.abs(np.fft.fft2(luma))).reshape(len(images), -1)

    invariant = ridge_accuracy(spectrum(train), y_train, spectrum(val), y_val)
    # Chance is 0.1. Pixels stay near it (what a linear model gets above it comes from classes
    # differing in variance, not in mean); the position-free spectrum holds the class.
    assert flat < 0.25
    assert invariant > 0.8
