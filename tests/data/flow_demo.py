"""A tiny demo dataset prepared with optical flow: real H.264 videos, RGB and DIS flow shards."""

from __future__ import annotations

from pathlib import Path

from vidscale.data.prepared.prepare import prepare_from_layout
from vidscale.data.synthetic.videos import write_synthetic_dataset

FRAMES = 8  # per video: 7 flows


def write_flow_demo(root: Path) -> tuple[Path, Path]:
    """(demo data, prepared directory with PREP/flow): 8 classes x (1 train + 1 val) videos of
    32 x 32 pixels, prepared at their own size."""
    data, prep = root / "demo", root / "prep"
    write_synthetic_dataset(
        data, seed=3, train_per_class=1, val_per_class=1, size=32, num_frames=FRAMES, workers=1
    )
    prepare_from_layout(
        "generic", data, prep, workers=1, progress=False, short_side=0, quality=90, flow="dis"
    )
    return data, prep
