"""Inflated 3D ResNet-50 classifiers: the two I3D baselines of the TSM paper (Table 1, Table 2).

Both are `TemporalSpec` tables over the shared trunk; only the temporal kernels, strides and
pools differ.

- I3D 3x3x3 (Hara et al. 2018): 16 input frames, every 3x3 conv inflated to 3x3x3, conv1
  7x7x7; time is halved by pool1 and by res3, res4, res5 (16 -> 8 -> 4 -> 2 -> 1).
- I3D 3x1x1 (Wang et al. 2018, the non-local paper's baseline trunk): 32 input frames, conv1
  5x7x7 with temporal stride 2, pool1 and pool2 halve time (32 -> 16 -> 8 -> 4), and the first
  1x1 conv of every other block (starting with each stage's first) is inflated to 3x1x1.
- I3D-NL 3x1x1 (Wang et al. 2018, "Non-local Neural Networks"): I3D 3x1x1 with 5 non-local
  blocks, "2 to res3 and 3 to res4, to every other residual block" (§5).
- The reference I3D and I3D-NL R50 (`I3D_REFERENCE`): the inflation of the non-local paper's
  released code and of MMAction2's I3D R50, whose res5 inflates its middle block rather than
  its outer two, with MMAction2's stem for 32x2 clips. Same frames per stage as I3D 3x1x1;
  28,043,472 parameters (400 classes), 35,397,840 with the 5 non-local blocks, every tensor
  of the shape MMAction2's `ResNet3d` + `I3DHead` give it.
- I3D 8x8 R50 of PySlowFast (`I3D_8X8`: its `ResNet` with `MODEL.ARCH: i3d`, config
  `Kinetics/c2/I3D_8x8_R50`) and PyTorchVideo (hub `i3d_r50`): the reference I3D's kernels for
  8-frame clips: conv1 5x7x7 at temporal stride 1, pool1 1x3x3 (no temporal pool in the stem)
  and a 2x1x1 max pool after res2 (PySlowFast's `_POOL1["i3d"]`, which acts there): 8 frames
  through res2, 4 from res3 on. The same 28,043,472 parameters (400 classes) and tensor shapes
  as `I3D_REFERENCE`.

Shape legend:
    N   clips in the batch          T   frames per clip (read from the input at every call)
    C   channels                    H, W  spatial size
    K   classes
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor, nn

from vidscale.models.nonlocal_block import NonLocalMode, NonLocalSpec
from vidscale.models.resnet import ResNet, TemporalSpec, init_classifier

I3D_3X3X3 = TemporalSpec(
    layout="volume",
    conv1=(7, 1),
    pool1=(3, 2),
    kernels=((3,), (3,), (3,), (3,)),
    inflate="spatial",
    strides=(1, 2, 2, 2),
)

# "Inflating the first 1x1 convolution in every other ResBlock" (TSM paper §3 (2)), counted from
# each stage's first block: 29.06M parameters with 400 classes, Table 1 says 29.3M. (The basis
# ((3,), (3, 1), (3, 1), (1, 3)) of the non-local reference code, `I3D_REFERENCE`, gives 28.04M.)
I3D_3X1X1 = TemporalSpec(
    layout="volume",
    conv1=(5, 2),
    pool1=(2, 2),
    pool2=(2, 2),
    kernels=((3, 1), (3, 1), (3, 1), (3, 1)),
    inflate="first",
)

# The I3D R50 of the non-local paper's released code (`obtain_arc`, ResNet-50 I3D:
# use_temp_convs ((1, 1, 1), (1, 0, 1, 0), (1, 0, 1, 0, 1, 0), (0, 1, 0)) for res2..res5) and of
# MMAction2 (`configs/_base_/models/i3d_r50.py`, the same tuples as `inflate`): the kernel bases
# below cycle to exactly those flags. The stem is MMAction2's for its 32x2 clips: conv1 5x7x7
# at temporal stride 2 (`conv1_stride_t=2`), pool1 1x3x3 at temporal stride 2
# (`pool1_stride_t=2`: it keeps every other frame and takes no maximum over time, unlike the
# 2x3x3 pool1 of `I3D_3X1X1`), pool2 2x1x1. 32 frames -> 16 -> 8 -> 4 at res3..res5.
I3D_REFERENCE = TemporalSpec(
    layout="volume",
    conv1=(5, 2),
    pool1=(1, 2),
    pool2=(2, 2),
    kernels=((3,), (3, 1), (3, 1), (1, 3)),
    inflate="first",
)
# PySlowFast's `_TEMPORAL_KERNEL_BASIS["i3d"]` ([[5]], [[3]], [[3, 1]], [[3, 1]], [[1, 3]]: conv1,
# res2..res5) with conv1 at temporal stride 1 and `_POOL1["i3d"]` ([2, 1, 1], a max pool after
# res2); PyTorchVideo's `i3d_r50` (stem 5x7x7, `stage1_pool` 2x1x1) is the same network.
I3D_8X8 = replace(I3D_REFERENCE, conv1=(5, 1), pool1=(1, 1))
# MMAction2's `I3DHead(init_std=0.01)` and the reference code's FC_INIT_STD 0.01.
REFERENCE_FC_STD = 0.01

# The 5-block placement of the non-local paper as MMAction2's I3D-NL R50 configs spell it,
# `non_local=((0, 0, 0), (0, 1, 0, 1), (0, 1, 0, 1, 0, 1), (0, 0, 0))`: after blocks 1 and 3 of
# res3 and 1, 3 and 5 of res4 (0-based).
I3D_NL_PLACEMENT = ((0, 0, 0), (0, 1, 0, 1), (0, 1, 0, 1, 0, 1), (0, 0, 0))


def i3d_non_local(mode: NonLocalMode) -> NonLocalSpec:
    """The non-local blocks of I3D-NL R50, of pairwise function `mode`."""
    return NonLocalSpec(after=I3D_NL_PLACEMENT, mode=mode)


class VolumeClassifier(nn.Module):
    """I3D: `forward(clips (N, C, T, H, W)) -> logits (N, K)`; 3D trunk, global average pool
    over time and space, dropout, new fc (with bias, N(0, `fc_std`) weights): MMAction2's
    `I3DHead` in that order. T is free at every call (enough frames to survive the temporal
    strides and pools: at least 8 for I3D 3x1x1 and the reference I3D)."""

    def __init__(self, trunk: ResNet, *, dropout: float = 0.5, fc_std: float = 0.001) -> None:
        super().__init__()
        if trunk.temporal.layout != "volume":
            raise ValueError("VolumeClassifier needs a trunk with the 'volume' layout")
        self.trunk = trunk
        self.dropout = nn.Dropout(dropout)
        init_classifier(trunk.fc, std=fc_std)

    def forward(self, clips: Tensor) -> Tensor:
        features_N_F_T_H_W = self.trunk.forward_features(clips, num_frames=clips.shape[2])
        return self.trunk.fc(self.dropout(self.trunk.pool(features_N_F_T_H_W)))
