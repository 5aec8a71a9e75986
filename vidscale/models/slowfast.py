"""SlowFast networks (Feichtenhofer, Fan, Malik, He: "SlowFast Networks for Video Recognition",
ICCV 2019), ResNet-50 instantiation, on the shared ResNet trunk.

Two `ResNetTrunk`s in the "volume" layout run side by side on the same clip (SlowFast §3):

- Slow pathway (§3.1): T/α frames, full width (64 stem channels). Temporal kernels are 1 in the
  stem (1x7x7) and in res2, res3, and 3 on the first 1x1 conv of every res4 and res5 block
  (3x1x1): the paper finds temporal convolutions in early layers hurt at this frame rate.
- Fast pathway (§3.2): all T frames, β = 1/8 of the channels (`width_div=8`), a 5x7x7 stem and
  3x1x1 first convs in every block of res2..res5. Neither pathway strides or pools time.
- Lateral connections (§3.3, "time-strided convolution"): after the stem and after res2, res3
  and res4, a conv with temporal kernel 5 (4x16) or 7 (8x8), temporal stride α and 2·β·C output
  channels (C: the Slow pathway's channels there), then BN and ReLU, maps Fast features to the
  Slow frame rate; they are concatenated to the Slow features as the next stage's input.
- Head (§3.4): global average pool of each pathway's res5 output, concatenated (2048 + 256
  features), dropout, fc.

MMAction2's `ResNet3dSlowFast` + `SlowFastHead` (`mmaction/models/backbones/resnet3d_slowfast.py`,
`configs/_base_/models/slowfast_r50.py`) is the same network but for three details, each a
`SlowFastSpec` field (`SLOWFAST_4X16_MMACTION2`, `SLOWFAST_8X8_MMACTION2`): its lateral is the
conv alone (`lateral_norm=False`: no BN, no ReLU), its Slow pathway reads every α-th frame from
the first (`interpolate(mode="nearest", scale_factor=1/α)`), and its head concatenates the Fast
features before the Slow ones.

The layout follows the reference implementation PySlowFast (`video_model_builder.SlowFast`,
`resnet_helper`, `stem_helper`, `_TEMPORAL_KERNEL_BASIS["slowfast"]`), including its frame
selection (`PackPathway`): the Slow pathway's frames are `linspace(0, T - 1, T // α)` of the
input. Differences, all outside the architecture: the classifier is initialised N(0, 0.001) as
every vidscale head (PySlowFast: 0.01), the last BN of each block starts at 1 as in the rest of
the trunk (PySlowFast's configs zero it), and there is no ImageNet initialisation (SlowFast is
trained from scratch, §4 "Training"; the Fast pathway's widths do not fit ImageNet weights).

Cost with 400 classes and 32 input frames (`bench.compute.flops`: convs and fc, BN not counted, as in
PySlowFast's numbers): 4x16 has 34,480,216 parameters, 27.64 GMACs at 224x224 and 36.10 at
256x256; 8x8 has 34,566,488 parameters, 50.31 and 65.71 GMACs. The model zoo's 36.1 and 65.7
"GFLOPs" are the 256x256 figures (its test views are 256-pixel crops).

Shape legend:
    N   clips in the batch          T   frames per clip (read from the input at every call);
                                        the Fast pathway's frames
    C   channels                    Ts  the Slow pathway's frames: T/α
    H, W  spatial size              K   classes
    α   frame-rate ratio (alpha)    β   channel ratio of the Fast pathway (1/beta_inv)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor, nn

from vidscale.models.resnet import (
    ARCHS,
    STAGE_PLANES,
    ResNetTrunk,
    TemporalSpec,
    init_classifier,
    temporal_resolutions,
)

# PySlowFast's _TEMPORAL_KERNEL_BASIS["slowfast"], one pathway each. Both keep the frame count.
SLOW_TEMPORAL = TemporalSpec(
    layout="volume",
    conv1=(1, 1),
    kernels=((1,), (1,), (3,), (3,)),
    inflate="first",
)
FAST_TEMPORAL = TemporalSpec(
    layout="volume",
    conv1=(5, 1),
    kernels=((3,), (3,), (3,), (3,)),
    inflate="first",
)


@dataclass(frozen=True)
class SlowFastSpec:
    """What distinguishes one SlowFast instantiation (SlowFast §3.4 and Table 1; the lateral
    variants are compared in §4.2).

    `alpha` is the frame-rate ratio Fast/Slow, `beta_inv` the channel ratio Slow/Fast (β = 1 /
    beta_inv), `fusion_kernel` the lateral conv's temporal kernel, `fusion_ratio` its channel
    expansion (2: the lateral gives 2·β·C channels, the paper's best time-strided variant).

    The defaults are PySlowFast's; MMAction2's configs differ in three (see the module
    docstring): `lateral` "conv_bn_relu" (PySlowFast's `FuseFastToSlow`) or "conv" (MMAction2's
    `lateral_norm=False`); `slow_sampling` "linspace" (PySlowFast's `PackPathway`) or "strided"
    (frames 0, α, 2α, ...: MMAction2's nearest-neighbour resampling); `head_order` the
    concatenation of the pooled features, "slow_fast" (PySlowFast) or "fast_slow" (MMAction2's
    `SlowFastHead`), which orders the classifier's input columns.
    """

    alpha: int
    fusion_kernel: int
    beta_inv: int = 8
    fusion_ratio: int = 2
    depth: int = 50
    lateral: Literal["conv_bn_relu", "conv"] = "conv_bn_relu"
    slow_sampling: Literal["linspace", "strided"] = "linspace"
    head_order: Literal["slow_fast", "fast_slow"] = "slow_fast"

    def __post_init__(self) -> None:
        if self.alpha < 1 or self.beta_inv < 1 or self.fusion_ratio < 1:
            raise ValueError(f"alpha, beta_inv and fusion_ratio must be >= 1: {self}")
        if self.fusion_kernel < 1 or self.fusion_kernel % 2 == 0:
            raise ValueError(f"fusion_kernel must be odd so 'same' padding exists: {self}")
        options = (
            (self.lateral, ("conv_bn_relu", "conv")),
            (self.slow_sampling, ("linspace", "strided")),
            (self.head_order, ("slow_fast", "fast_slow")),
        )
        if any(value not in allowed for value, allowed in options):
            raise ValueError(f"lateral, slow_sampling or head_order is not a known variant: {self}")

    def slow_frames(self, frames: int) -> int:
        """Ts for T input frames: T // α, as PySlowFast's `PackPathway`, wherever α divides T
        (which PySlowFast requires). Otherwise ceil(T / α), the number of frames the
        time-strided lateral conv (padding kernel // 2) produces, so the concatenation still
        fits: multigrid training and small tests feed T that α need not divide."""
        if frames < 1:
            raise ValueError(f"SlowFast needs at least one frame, got {frames}")
        return math.ceil(frames / self.alpha)


# SlowFast 4x16 (slow: 4 frames at stride 16) and 8x8, both reading 32 frames: PySlowFast's
# SLOWFAST_4x16_R50 and SLOWFAST_8x8_R50 configs.
SLOWFAST_4X16 = SlowFastSpec(alpha=8, fusion_kernel=5)
SLOWFAST_8X8 = SlowFastSpec(alpha=4, fusion_kernel=7)
# The same as MMAction2's configs slowfast_r50_8xb8-4x16x1-256e_kinetics400-rgb and
# slowfast_r50_8xb8-8x8x1-256e_kinetics400-rgb build them (resample_rate = speed_ratio = α).
SLOWFAST_4X16_MMACTION2 = replace(
    SLOWFAST_4X16, lateral="conv", slow_sampling="strided", head_order="fast_slow"
)
SLOWFAST_8X8_MMACTION2 = replace(
    SLOWFAST_8X8, lateral="conv", slow_sampling="strided", head_order="fast_slow"
)


class FastToSlow(nn.Module):
    """Lateral connection (SlowFast §3.3): x_N_C_T_H_W of the Fast pathway -> the Slow pathway's
    frame rate, (N, ratio·C, ceil(T / α), H, W): a (kernel x 1 x 1) conv with temporal stride
    α, BN, ReLU (PySlowFast `FuseFastToSlow`); with `norm=False` the conv alone, no BN or ReLU
    modules (MMAction2's `ConvModule` with `lateral_norm=False`)."""

    def __init__(
        self, channels: int, *, ratio: int, kernel: int, alpha: int, norm: bool = True
    ) -> None:
        super().__init__()
        self.conv = nn.Conv3d(
            channels,
            channels * ratio,
            (kernel, 1, 1),
            stride=(alpha, 1, 1),
            padding=(kernel // 2, 0, 0),
            bias=False,
        )
        self.bn = nn.BatchNorm3d(channels * ratio) if norm else None
        self.relu = nn.ReLU(inplace=True) if norm else None
        # As the trunk's convs (torchvision's init); the BN starts at its default (1, 0).
        nn.init.kaiming_normal_(self.conv.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, fast: Tensor) -> Tensor:
        fused = windowed_conv(self.conv, fast) if _cpu_bf16(fast) else self.conv(fast)
        if self.bn is None or self.relu is None:
            return fused
        return self.relu(self.bn(fused))


def _cpu_bf16(x: Tensor) -> bool:
    """Whether a convolution of `x` would run in bfloat16 on the CPU (autocast or bf16 data)."""
    if x.device.type != "cpu":
        return False
    autocast = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu")
    return x.dtype == torch.bfloat16 or autocast == torch.bfloat16


def windowed_conv(conv: nn.Conv3d, x: Tensor) -> Tensor:
    """`conv(x)` for a (k x 1 x 1) conv with temporal stride s, computed as the frames each
    output reads (windows of k every s, zero-padded as `conv` pads) stacked as channels, then
    a 1 x 1 x 1 conv: the same sums of products, in another order.

    Why: on a CPU with AMX (torch 2.13), oneDNN's bf16 convolution for the time-strided
    lateral conv corrupted the heap at some shapes (128 channels at 12-16 px with stride 8 and
    kernel 3 or 5, i.e. SlowFast 4x16's last lateral at 224²: "munmap_chunk(): invalid
    pointer", the process aborted; 64 channels, 7 px, or strides 1-5 ran). oneDNN's AMX bf16
    strided conv3d has a known wrong-values defect as well (pytorch/pytorch#169688). A 1 x 1 x 1
    conv has no stride; fp32 and GPUs keep `conv`.
    """
    if isinstance(conv.padding, str):
        raise ValueError(f"windowed_conv needs numeric padding, got {conv.padding!r}")
    (k, kh, kw), (s, sh, sw), (p, ph, pw) = conv.kernel_size, conv.stride, conv.padding
    if (kh, kw, sh, sw, ph, pw) != (1, 1, 1, 1, 0, 0) or conv.groups != 1 or conv.bias is not None:
        raise ValueError(f"windowed_conv takes a bias-free (k x 1 x 1) conv, got {conv}")
    n, c, _, h, w = x.shape
    windows = nn.functional.pad(x, (0, 0, 0, 0, p, p)).unfold(2, k, s)  # (N, C, T', H, W, k)
    frames = windows.shape[2]
    stacked = windows.permute(0, 1, 5, 2, 3, 4).reshape(n, c * k, frames, h, w)
    weight = conv.weight.reshape(conv.out_channels, c * k, 1, 1, 1)
    return nn.functional.conv3d(stacked, weight)


class SlowFast(nn.Module):
    """SlowFast-ResNet: `forward(clips (N, C, T, H, W)) -> logits (N, K)`.

    T is the Fast pathway's frame count, read at every call; the Slow pathway takes Ts = T/α of
    them (`pack_pathways`). Any T >= 1 and any crop work (the head pools globally), as
    multigrid training needs; crops of at least 32 pixels keep res5 non-empty. Keys: `slow.*`
    and `fast.*` are torchvision-style trunks (`conv1`, `bn1`, `layer1.0.conv1`, ...),
    `lateral.{0..3}` the fusions before res2..res5, `fc` the classifier on 2048 + 2048·β
    features.
    """

    def __init__(
        self,
        spec: SlowFastSpec,
        *,
        num_classes: int,
        in_channels: int = 3,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.spec = spec
        expansion = ARCHS[spec.depth][0].expansion
        # Fast pathway's channels out of the stem and res2..res4: what each lateral receives.
        fast_widths = [64 // spec.beta_inv] + [
            p * expansion // spec.beta_inv for p in STAGE_PLANES[:3]
        ]
        lateral_out = tuple(c * spec.fusion_ratio for c in fast_widths)
        self.slow = ResNetTrunk(
            spec.depth,
            in_channels=in_channels,
            temporal=SLOW_TEMPORAL,
            extra_in_channels=(lateral_out[0], lateral_out[1], lateral_out[2], lateral_out[3]),
        )
        self.fast = ResNetTrunk(
            spec.depth, in_channels=in_channels, temporal=FAST_TEMPORAL, width_div=spec.beta_inv
        )
        if list(self.fast.stage_channels[:4]) != fast_widths:  # the trunk's widths, not a guess
            raise AssertionError(f"fast widths {self.fast.stage_channels} != {fast_widths}")
        self.lateral = nn.ModuleList(
            FastToSlow(
                c,
                ratio=spec.fusion_ratio,
                kernel=spec.fusion_kernel,
                alpha=spec.alpha,
                norm=spec.lateral == "conv_bn_relu",
            )
            for c in fast_widths
        )
        self.num_features = self.slow.num_features + self.fast.num_features
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(self.num_features, num_classes)
        init_classifier(self.fc)

    def pack_pathways(self, clips: Tensor) -> tuple[Tensor, Tensor]:
        """(slow (N, C, Ts, H, W), fast (N, C, T, H, W)) from clips (N, C, T, H, W): the Slow
        pathway's frames evenly spaced over the clip, first and last included (PySlowFast's
        `PackPathway`: `linspace(0, T - 1, Ts).long()`), or with `slow_sampling="strided"`
        frames 0, α, 2α, ... (MMAction2's nearest-neighbour `interpolate` by 1/α, the same
        frames wherever α divides T); the Fast pathway sees every frame."""
        if clips.dim() != 5:
            raise ValueError(f"expected clips (N, C, T, H, W), got shape {tuple(clips.shape)}")
        if self.spec.slow_sampling == "strided":
            return clips[:, :, :: self.spec.alpha], clips
        frames = clips.shape[2]
        index = torch.linspace(
            0, frames - 1, self.spec.slow_frames(frames), device=clips.device
        ).long()
        return clips.index_select(2, index), clips

    def forward_features(self, clips: Tensor) -> tuple[Tensor, Tensor]:
        """The res5 outputs (slow (N, 2048, Ts, H/32, W/32), fast (N, 2048·β, T, H/32, W/32))."""
        slow_x, fast_x = self.pack_pathways(clips)
        slow, fast = self.slow.stem(slow_x), self.fast.stem(fast_x)
        stages = zip(self.lateral, self.slow.stages(), self.fast.stages(), strict=True)
        for lateral, slow_stage, fast_stage in stages:
            # Fusion precedes each stage: after the stem and after res2, res3, res4 (§3.3).
            slow = torch.cat([slow, lateral(fast)], dim=1)
            # num_frames only matters to the "frames" layout (shift, pool2); pass the truth.
            slow = slow_stage(slow, num_frames=slow.shape[2])
            fast = fast_stage(fast, num_frames=fast.shape[2])
        return slow, fast

    def forward(self, clips: Tensor) -> Tensor:
        slow, fast = self.forward_features(clips)
        pooled = [self.slow.pool(slow), self.fast.pool(fast)]
        if self.spec.head_order == "fast_slow":
            pooled.reverse()
        features_N_F = torch.cat(pooled, dim=1)
        return self.fc(self.dropout(features_N_F))

    def temporal_resolutions(self, *, frames: int) -> dict[str, int]:
        """Frames at each stage's output for T = `frames` (the TSM paper's Table 2 columns):
        "data" is T, conv1..res5 are the Slow pathway's (Ts throughout), fast_conv1..fast_res5
        the Fast pathway's (T throughout); neither pathway has a temporal stride or pool2."""
        slow = temporal_resolutions(self.slow.temporal, frames=self.spec.slow_frames(frames))
        fast = temporal_resolutions(self.fast.temporal, frames=frames)
        inner = ("data", "global_pool")
        out = {"data": frames}
        out |= {k: v for k, v in slow.items() if k not in inner}
        out |= {f"fast_{k}": v for k, v in fast.items() if k not in inner}
        out["global_pool"] = 1
        return out
