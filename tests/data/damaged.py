"""A copy of a real encoded dataset with some of its training videos damaged as files get
damaged: bits flipped, cut short, overwritten with garbage."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import VideoClipDataset

KINDS = ("bit flips", "truncated", "garbage")
FLIPS = 64  # bits flipped in a 4 KB file a round: almost always enough to stop it decoding
ROUNDS = 8  # rounds of damage at most before a file that still decodes fails the helper


def damage(path: Path, kind: str, rng: np.random.Generator) -> None:
    data = bytearray(path.read_bytes())
    if kind == "bit flips":
        for pos in rng.integers(0, len(data), FLIPS):
            data[pos] ^= 1 << int(rng.integers(8))
    elif kind == "truncated":  # the MP4 index (moov) is written last: it is cut off
        del data[len(data) // 3 :]
    else:
        data[:] = rng.integers(0, 256, len(data), dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))


def damaged_copy(source: Path, out: Path, *, count: int, seed: int = 0) -> list[Path]:
    """`source` (a generic-layout dataset) copied to `out` with `count` of its training videos
    damaged, the kinds taking turns; returns them. Each is checked to be unreadable."""
    shutil.copytree(source, out)
    train = sorted((out / "videos" / "train").rglob("*.mp4"))
    rng = np.random.default_rng(seed)
    chosen = [train[int(i)] for i in sorted(rng.choice(len(train), count, replace=False))]
    spec = ClipSpec(frames=4, crop_size=16, short_side=16)
    still = []
    for i, path in enumerate(chosen):
        # Flipped bits can all land where the decoder does not look: damage again until the
        # file no longer decodes (one round nearly always suffices).
        for _ in range(ROUNDS):
            damage(path, KINDS[i % len(KINDS)], rng)
            if not readable(path, spec):
                break
        else:
            still.append(path.name)
    assert not still, f"damaged but still readable: {still}"
    return chosen


def readable(path: Path, spec: ClipSpec) -> bool:
    """Whether the dataset decodes a clip of `path`."""
    return bool(VideoClipDataset([VideoRecord(path, 0)], spec, train=False)[0]["readable"])
