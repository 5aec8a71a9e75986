"""The demo's claim, trained: on `vidscale synth` data an order-blind model (TSN's frame average)
stays at chance while an order-aware one with the same per-frame trunk, the same steps and the
same data learns the classes (`vidscale.data.synthetic`, the demo recipes, docs/design.md).

The two models are small stand-ins, not the registered ResNets (which take minutes here): one
per-frame CNN, its features averaged over frames (order-blind, as TSN's consensus is) or
concatenated in frame order (order-aware). Only the consensus differs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from vidscale.data.layouts import read_layout
from vidscale.data.media.decode import decode_frames
from vidscale.data.synthetic.videos import CLASSES, write_synthetic_dataset

FRAMES = 8
STEPS, BATCH = 150, 32
CHANCE = 1 / len(CLASSES)


class FrameNet(nn.Module):
    """(N, 3, T, H, W) -> (N, classes): a per-frame CNN, then the mean over frames (`ordered`
    False, order-blind) or the frames' features in order (`ordered` True)."""

    def __init__(self, *, ordered: bool) -> None:
        super().__init__()
        self.ordered = ordered
        self.trunk = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
        )
        self.head = nn.Linear(128 * (FRAMES if ordered else 1), len(CLASSES))

    def forward(self, clips: Tensor) -> Tensor:
        n, c, t, h, w = clips.shape
        x_NT_C_H_W = clips.transpose(1, 2).reshape(n * t, c, h, w)
        x_N_T_F = self.trunk(x_NT_C_H_W).reshape(n, t, -1)
        return self.head(x_N_T_F.flatten(1) if self.ordered else x_N_T_F.mean(1))


def clips_and_labels(root: Path, split: str) -> tuple[Tensor, Tensor]:
    records = getattr(read_layout("generic", root), split)
    frames = np.stack([decode_frames(r.path, list(range(FRAMES))) for r in records])
    clips = torch.from_numpy(frames).permute(0, 4, 1, 2, 3).float() / 255 - 0.5
    return clips, torch.tensor([r.label for r in records])


def val_accuracy(
    *, ordered: bool, train: tuple[Tensor, Tensor], val: tuple[Tensor, Tensor]
) -> float:
    """A `FrameNet` trained `STEPS` steps on `train`: its top-1 on `val`."""
    torch.manual_seed(0)  # the same initial weights (the trunk's) and batches for both models
    model = FrameNet(ordered=ordered)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    clips, labels = train
    for _ in range(STEPS):
        batch = torch.randint(0, len(labels), (BATCH,))
        loss = nn.functional.cross_entropy(model(clips[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return (model(val[0]).argmax(1) == val[1]).float().mean().item()


@pytest.mark.slow
def test_order_blind_stays_at_chance_where_order_aware_learns(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    write_synthetic_dataset(
        root, seed=0, train_per_class=24, val_per_class=8, num_frames=FRAMES, workers=1
    )
    train, val = clips_and_labels(root, "train"), clips_and_labels(root, "val")
    blind = val_accuracy(ordered=False, train=train, val=val)
    aware = val_accuracy(ordered=True, train=train, val=val)
    # 64 validation videos: chance is 8 right (sd 2.6); 16 is three sd above it
    assert blind <= 2 * CHANCE, (blind, aware)
    assert aware >= 0.6, (blind, aware)
