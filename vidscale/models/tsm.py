"""Frame-level video classifiers: TSN and TSM (TSM paper §2-3; TSN, Wang et al. 2016).

A 2D trunk (shifted for TSM, plain for TSN) runs on every frame; dropout and a new fc give
per-frame logits, averaged over time (TSN's average consensus). `StreamingTSM` runs a causal
(online) TSM one frame at a time with the same numbers as the offline model.

Shape legend:
    N   clips in the batch          T   frames per clip (read from the input at every call)
    C   channels                    H, W  spatial size
    K   classes                     NT  N*T: frames folded into the batch
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from vidscale.models.resnet import ResNet, init_classifier
from vidscale.models.temporal_shift import CachedShift, TemporalShift


class FrameClassifier(nn.Module):
    """TSN / TSM: `forward(clips (N, C, T, H, W)) -> logits (N, K)`, T free at every call.

    With the trunk's temporal pool (TSM `temporal_pool`) the consensus averages the T/2 frames
    left after res2; the shift itself never changes the frame count.
    """

    def __init__(self, trunk: ResNet, *, dropout: float = 0.5) -> None:
        super().__init__()
        if trunk.temporal.layout != "frames":
            raise ValueError("FrameClassifier needs a trunk with the 'frames' layout")
        self.trunk = trunk
        self.dropout = nn.Dropout(dropout)
        init_classifier(trunk.fc)

    def frame_logits(self, clips: Tensor) -> Tensor:
        """Per-frame logits (N, T', K) before the consensus (T' = T, or T/2 with temporal pool)."""
        n, c, t, h, w = clips.shape
        x_NT_C_H_W = clips.transpose(1, 2).reshape(n * t, c, h, w)
        features = self.trunk.forward_features(x_NT_C_H_W, num_frames=t)
        logits_NT_K = self.trunk.fc(self.dropout(self.trunk.pool(features)))
        return logits_NT_K.view(n, -1, logits_NT_K.shape[-1])

    def forward(self, clips: Tensor) -> Tensor:
        return self.frame_logits(clips).mean(dim=1)


class StreamingTSM(nn.Module):
    """Online TSM: frame-by-frame inference of a causal `FrameClassifier`.

    Works on a copy whose shift layers are `CachedShift`s, so the given model is untouched.
    `forward(frame (N, C, H, W))` returns that frame's logits (N, K), equal to the offline
    model's `frame_logits(clip)[:, t]` in eval mode; `reset()` starts new clips. The average of
    the logits seen since `reset()` is `mean_logits()`, the offline clip prediction.
    """

    def __init__(self, model: FrameClassifier) -> None:
        super().__init__()
        if model.trunk.temporal.pool2 != (1, 1):
            raise ValueError("streaming needs a model without temporal pooling")
        self.model = copy.deepcopy(model)
        for block in self.model.trunk.blocks():
            if isinstance(block.shift, TemporalShift):
                if not block.shift.causal:
                    raise ValueError("streaming needs a causal shift (an online_tsm_* model)")
                block.shift = CachedShift(block.shift.fold_div)
        self._sum: Tensor | None = None
        self._count = 0

    def reset(self) -> None:
        for block in self.model.trunk.blocks():
            if isinstance(block.shift, CachedShift):
                block.shift.reset()
        self._sum, self._count = None, 0

    @torch.no_grad()
    def forward(self, frame_N_C_H_W: Tensor) -> Tensor:
        features = self.model.trunk.forward_features(frame_N_C_H_W, num_frames=1)
        logits_N_K = self.model.trunk.fc(self.model.dropout(self.model.trunk.pool(features)))
        self._sum = logits_N_K.clone() if self._sum is None else self._sum + logits_N_K
        self._count += 1
        return logits_N_K

    def mean_logits(self) -> Tensor:
        if self._sum is None:
            raise RuntimeError("no frame seen since reset()")
        return self._sum / self._count
