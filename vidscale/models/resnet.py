"""One ResNet trunk (He et al. 2016) for video: 2D per frame, temporally shifted, or inflated.

What makes a trunk TSN, TSM or I3D is data, not code: a `TemporalSpec` (temporal kernel sizes and
strides per stage, like SlowFast's `_TEMPORAL_KERNEL_BASIS`) and an optional `ShiftSpec`. The
`state_dict` keys equal torchvision's (conv1, bn1, layer1.0.conv1, ..., layer2.0.downsample.0,
fc), so an ImageNet checkpoint saved by torchvision loads (`vidscale.models.pretrained`).

Shape legend:
    N   clips in the batch          T   frames per clip at the current stage
    C   channels                    H, W  spatial size
    NT  N*T: frames folded into the batch
    layout "frames": activations x_NT_C_H_W, 2D convolutions (TSN, TSM)
    layout "volume": activations x_N_C_T_H_W, 3D convolutions, temporal kernel 1 where not
                     inflated (I3D)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, cast

import torch.nn.functional as F
from torch import Tensor, nn

from vidscale.models import conv
from vidscale.models.batchnorm import set_batch_clips
from vidscale.models.nonlocal_block import NonLocalBlock, NonLocalMode, NonLocalSpec
from vidscale.models.temporal_shift import ShiftSpec, TemporalShift

Layout = Literal["frames", "volume"]
Inflate = Literal["first", "spatial"]
TimeOp = tuple[int, int]  # (kernel, stride) along time; padding is (kernel - 1) // 2

STAGE_PLANES = (64, 128, 256, 512)


@dataclass(frozen=True)
class TemporalSpec:
    """The temporal structure of a trunk; the default is a 2D network applied per frame.

    `kernels[s]` is a basis cycled over the blocks of stage s (`(3, 1)`: every other block gets
    a temporal kernel of 3). `inflate` says which convs of a block take it: `"first"` the block's
    first conv (3x1x1 in a bottleneck, Wang et al.), `"spatial"` every 3x3 conv (3x3x3, Hara et
    al.). `strides[s]` is the temporal stride of stage s's first block (on the same conv as its
    spatial stride, and on the downsample). `pool2` max-pools time after res2 (TSM's
    `temporal_pool`; Wang et al.'s pool2); the "frames" layout allows only this temporal op.
    """

    layout: Layout = "frames"
    conv1: TimeOp = (1, 1)
    pool1: TimeOp = (1, 1)
    pool2: TimeOp = (1, 1)
    kernels: tuple[tuple[int, ...], ...] = ((1,), (1,), (1,), (1,))
    inflate: Inflate = "spatial"
    strides: tuple[int, int, int, int] = (1, 1, 1, 1)

    def __post_init__(self) -> None:
        if len(self.kernels) != 4 or any(not basis for basis in self.kernels):
            raise ValueError(
                f"kernels needs a non-empty basis for each of 4 stages: {self.kernels}"
            )
        if any(k % 2 == 0 for basis in self.kernels for k in basis) or self.conv1[0] % 2 == 0:
            raise ValueError("temporal conv kernels must be odd so that 'same' padding exists")
        inflated = (
            self.conv1 != (1, 1)
            or self.pool1 != (1, 1)
            or any(k != 1 for basis in self.kernels for k in basis)
            or any(s != 1 for s in self.strides)
        )
        if self.layout == "frames" and inflated:
            raise ValueError("the 'frames' layout has 2D convs: only pool2 may act on time")

    def block_kernel(self, stage: int, block: int) -> int:
        basis = self.kernels[stage]
        return basis[block % len(basis)]


def _time_out(frames: int, op: TimeOp) -> int:
    kernel, stride = op
    return (frames + 2 * ((kernel - 1) // 2) - kernel) // stride + 1


def temporal_resolutions(spec: TemporalSpec, *, frames: int) -> dict[str, int]:
    """Frames at the output of each stage (TSM paper Table 2); "pool2" only where there is one."""
    out = {"data": frames}
    out["conv1"] = _time_out(frames, spec.conv1)
    out["pool1"] = _time_out(out["conv1"], spec.pool1)
    out["res2"] = out["pool1"]
    t = out["res2"]
    if spec.pool2 != (1, 1):
        t = out["pool2"] = _time_out(t, spec.pool2)
    for name, stride in zip(("res3", "res4", "res5"), spec.strides[1:], strict=True):
        t = out[name] = _time_out(t, (1, stride))
    out["global_pool"] = 1
    return out


def _conv(
    layout: Layout, cin: int, cout: int, *, k: int, kt: int = 1, stride: int = 1, t_stride: int = 1
) -> nn.Module:
    # `conv` modules: exact where torch's CPU bf16 kernels are not (1-pixel inputs, multigrid).
    if layout == "frames":
        return conv.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
    return conv.Conv3d(
        cin,
        cout,
        (kt, k, k),
        stride=(t_stride, stride, stride),
        padding=(kt // 2, k // 2, k // 2),
        bias=False,
    )


def _bn(layout: Layout, channels: int) -> nn.Module:
    return nn.BatchNorm2d(channels) if layout == "frames" else nn.BatchNorm3d(channels)


@dataclass(frozen=True)
class BlockSpec:
    """What differs between the blocks of one trunk."""

    layout: Layout
    stride: int = 1
    t_stride: int = 1
    kt: int = 1
    inflate: Inflate = "spatial"
    shift: ShiftSpec | None = None
    non_local: NonLocalMode | None = None


class _Block(nn.Module, ABC):
    """Residual block skeleton: shift placement, identity path and the final add + ReLU.

    Subclasses create their convs before calling `_init_shared`, so that the state_dict keys come
    in torchvision's order (conv1, bn1, ..., downsample).
    """

    expansion = 1
    downsample: nn.Module | None
    shift: nn.Module | None
    non_local: NonLocalBlock | None

    def _init_shared(self, cin: int, planes: int, spec: BlockSpec) -> None:
        cout = planes * self.expansion
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if spec.stride != 1 or spec.t_stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                _conv(spec.layout, cin, cout, k=1, stride=spec.stride, t_stride=spec.t_stride),
                _bn(spec.layout, cout),
            )
        self.shift = None
        self.shift_place = "residual"
        if spec.shift is not None:
            self.shift = TemporalShift(spec.shift.fold_div, causal=spec.shift.causal)
            self.shift_place = spec.shift.place
        # After the block's output ReLU, as MMAction2's `Bottleneck3d` (Wang et al. §4.1: "after
        # residual blocks"); its keys follow the block's own (`layer2.1.non_local.*`).
        self.non_local = None
        if spec.non_local is not None:
            self.non_local = NonLocalBlock(cout, mode=spec.non_local)

    @abstractmethod
    def branch(self, x: Tensor) -> Tensor:
        """The residual branch: convs, BNs and inner ReLUs, without the identity."""

    def forward(self, x: Tensor, *, num_frames: int) -> Tensor:
        if self.shift is not None and self.shift_place == "block":
            x = self.shift(x, num_frames=num_frames)
        identity = x if self.downsample is None else self.downsample(x)
        if self.shift is not None and self.shift_place == "residual":
            x = self.shift(x, num_frames=num_frames)
        out = self.branch(x)
        out += identity
        out = self.relu(out)
        return out if self.non_local is None else self.non_local(out)


class BasicBlock(_Block):
    """Two 3x3 convs (ResNet-18/34); the stride is on conv1, as in torchvision."""

    expansion = 1

    def __init__(self, cin: int, *, planes: int, spec: BlockSpec) -> None:
        super().__init__()
        kt = spec.kt
        kt2 = spec.kt if spec.inflate == "spatial" else 1
        self.conv1 = _conv(
            spec.layout, cin, planes, k=3, kt=kt, stride=spec.stride, t_stride=spec.t_stride
        )
        self.bn1 = _bn(spec.layout, planes)
        self.conv2 = _conv(spec.layout, planes, planes, k=3, kt=kt2)
        self.bn2 = _bn(spec.layout, planes)
        self._init_shared(cin, planes, spec)

    def branch(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        return self.bn2(self.conv2(out))


class Bottleneck(_Block):
    """1x1 -> 3x3 -> 1x1 (ResNet-50/101/152); the stride is on the 3x3 conv (torchvision v1.5)."""

    expansion = 4

    def __init__(self, cin: int, *, planes: int, spec: BlockSpec) -> None:
        super().__init__()
        kt1, kt2 = (spec.kt, 1) if spec.inflate == "first" else (1, spec.kt)
        self.conv1 = _conv(spec.layout, cin, planes, k=1, kt=kt1)
        self.bn1 = _bn(spec.layout, planes)
        self.conv2 = _conv(
            spec.layout, planes, planes, k=3, kt=kt2, stride=spec.stride, t_stride=spec.t_stride
        )
        self.bn2 = _bn(spec.layout, planes)
        self.conv3 = _conv(spec.layout, planes, planes * 4, k=1)
        self.bn3 = _bn(spec.layout, planes * 4)
        self._init_shared(cin, planes, spec)

    def branch(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.bn3(self.conv3(out))


ARCHS: dict[int, tuple[type[_Block], tuple[int, int, int, int]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


class Stage(nn.ModuleList):
    """The blocks of one stage (keys `layerX.i.*`), threading the clip length through them."""

    def forward(self, x: Tensor, *, num_frames: int) -> Tensor:
        for block in self:
            x = block(x, num_frames=num_frames)
        return x


def temporal_max_pool(x: Tensor, *, op: TimeOp, layout: Layout, num_frames: int) -> Tensor:
    """Max-pool along time in either layout (TSM's temporal pool; Wang et al.'s pool2)."""
    kernel, stride = op
    size, step, pad = (kernel, 1, 1), (stride, 1, 1), ((kernel - 1) // 2, 0, 0)
    if layout == "volume":
        return F.max_pool3d(x, size, step, pad)
    nt, c, h, w = x.shape
    x_N_C_T_H_W = x.view(nt // num_frames, num_frames, c, h, w).transpose(1, 2)
    pooled = F.max_pool3d(x_N_C_T_H_W, size, step, pad)
    return pooled.transpose(1, 2).reshape(-1, c, h, w)


def init_classifier(fc: nn.Linear, *, std: float = 0.001) -> None:
    """A new video classifier: N(0, std) weights, zero bias; the default std is the TSM reference
    code's (MMAction2's `I3DHead` and PySlowFast use 0.01)."""
    nn.init.normal_(fc.weight, 0.0, std)
    nn.init.zeros_(fc.bias)


class ResNetTrunk(nn.Module):
    """The convolutional part of a ResNet: stem (conv1, bn1, relu, maxpool) and res2..res5
    (layer1..layer4), without a classifier; its layout, inflation and shift come from the specs.

    Two options exist for SlowFast's pathways (Feichtenhofer et al. 2019, §3.2-3.3): `width_div`
    divides the channels of the stem and of every stage (8 for the Fast pathway, β = 1/8), and
    `extra_in_channels[s]` widens the input of stage s's first block by that many channels (the
    lateral connections concatenated to the Slow pathway before res2..res5). Their defaults give
    exactly the torchvision trunk. `stage_channels` are the output channels of the stem and of
    res2..res5. `non_local` (volume layout only) puts non-local blocks after the residual blocks
    it flags (Wang et al. 2018; `NonLocalBlock`), under the keys `layerX.i.non_local.*`.
    Initialisation follows torchvision (Kaiming normal, fan_out, for convs; BN at 1, 0), the
    non-local blocks keep their own (identities), unless `init_weights=False`, which leaves it
    to an owner that adds modules first.
    """

    def __init__(
        self,
        depth: int = 50,
        *,
        in_channels: int = 3,
        temporal: TemporalSpec | None = None,
        shift: ShiftSpec | None = None,
        width_div: int = 1,
        extra_in_channels: tuple[int, int, int, int] = (0, 0, 0, 0),
        non_local: NonLocalSpec | None = None,
        init_weights: bool = True,
    ) -> None:
        super().__init__()
        if depth not in ARCHS:
            raise ValueError(f"ResNet depth must be one of {sorted(ARCHS)}, got {depth}")
        if width_div < 1 or 64 % width_div != 0:
            raise ValueError(f"width_div must divide the stem's 64 channels, got {width_div}")
        if len(extra_in_channels) != 4 or any(c < 0 for c in extra_in_channels):
            raise ValueError(f"extra_in_channels needs 4 counts >= 0: {extra_in_channels}")
        self.temporal = temporal or TemporalSpec()
        self.depth = depth
        layout = self.temporal.layout
        if shift is not None and layout != "frames":
            raise ValueError("the temporal shift acts on the 'frames' layout only")
        block, counts = ARCHS[depth]
        if non_local is not None:
            if layout != "volume":
                raise ValueError("non-local blocks act on the 'volume' layout only")
            non_local.check_depths(counts)
        kt, t_stride = self.temporal.conv1
        stem = 64 // width_div
        self.conv1 = _conv(layout, in_channels, stem, k=7, kt=kt, stride=2, t_stride=t_stride)
        self.bn1 = _bn(layout, stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = self._pool1(layout)
        cin = stem
        widths = [stem]
        stages = []
        for s, (planes, count) in enumerate(zip(STAGE_PLANES, counts, strict=True)):
            planes //= width_div
            cin += extra_in_channels[s]
            blocks = []
            for i in range(count):
                spec = self._block_spec(s, i, shift=shift, non_local=non_local)
                blocks.append(block(cin, planes=planes, spec=spec))
                cin = planes * block.expansion
            stages.append(Stage(blocks))
            widths.append(cin)
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.num_features = cin
        self.stage_channels = tuple(widths)
        if init_weights:
            self._init_weights()

    def _block_spec(
        self, stage: int, block: int, *, shift: ShiftSpec | None, non_local: NonLocalSpec | None
    ) -> BlockSpec:
        first = block == 0
        return BlockSpec(
            layout=self.temporal.layout,
            stride=2 if stage > 0 and first else 1,
            t_stride=self.temporal.strides[stage] if first else 1,
            kt=self.temporal.block_kernel(stage, block),
            inflate=self.temporal.inflate,
            shift=shift if shift is not None and block % shift.every == 0 else None,
            non_local=non_local.mode
            if non_local is not None and non_local.has_block(stage, block)
            else None,
        )

    def _pool1(self, layout: Layout) -> nn.Module:
        if layout == "frames":
            return nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        kernel, stride = self.temporal.pool1
        return nn.MaxPool3d(
            (kernel, 3, 3), stride=(stride, 2, 2), padding=((kernel - 1) // 2, 1, 1)
        )

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d | nn.BatchNorm3d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for m in self.modules():  # after the loop above, which reached their convs and BN too
            if isinstance(m, NonLocalBlock):
                m.reset_parameters()

    def stages(self) -> tuple[Stage, Stage, Stage, Stage]:
        """res2..res5 (layer1..layer4)."""
        return self.layer1, self.layer2, self.layer3, self.layer4

    def blocks(self) -> Iterator[_Block]:
        for stage in self.stages():
            yield from cast(Iterable[_Block], stage)

    def stem(self, x: Tensor) -> Tensor:
        """conv1, bn1, ReLU, pool1: the input of res2."""
        return self.maxpool(self.relu(self.bn1(self.conv1(x))))

    def forward_features(self, x: Tensor, *, num_frames: int) -> Tensor:
        """(NT, C, H, W) with T = num_frames ("frames"), or (N, C, T, H, W) ("volume")."""
        if self.training and self.temporal.layout == "frames":
            # Sub-batch BN (models.batchnorm) must split clips, not frames: tell it N.
            set_batch_clips(self, x.shape[0] // num_frames)
        x = self.layer1(self.stem(x), num_frames=num_frames)
        if self.temporal.pool2 != (1, 1):
            x = temporal_max_pool(
                x, op=self.temporal.pool2, layout=self.temporal.layout, num_frames=num_frames
            )
            num_frames = _time_out(num_frames, self.temporal.pool2)
        x = self.layer2(x, num_frames=num_frames)
        x = self.layer3(x, num_frames=num_frames)
        return self.layer4(x, num_frames=num_frames)

    def pool(self, features: Tensor) -> Tensor:
        """Global average pool: (NT, F) per frame ("frames") or (N, F) per clip ("volume")."""
        return features.flatten(2).mean(2)


class ResNet(ResNetTrunk):
    """ResNet-18/34/50/101/152: `ResNetTrunk` and a classifier `fc` (torchvision's keys).

    `forward_features` returns the last feature map (x_NT_C_H_W or x_N_C_T_H_W by layout);
    `forward` pools it and applies `fc`, which on 2D images (num_frames = 1) is torchvision's
    ResNet. The weights are initialised after `fc` is created, as torchvision does, so a seed
    gives the same weights as before the trunk was split out.
    """

    def __init__(
        self,
        depth: int = 50,
        *,
        num_classes: int = 1000,
        in_channels: int = 3,
        temporal: TemporalSpec | None = None,
        shift: ShiftSpec | None = None,
        non_local: NonLocalSpec | None = None,
    ) -> None:
        super().__init__(
            depth,
            in_channels=in_channels,
            temporal=temporal,
            shift=shift,
            non_local=non_local,
            init_weights=False,
        )
        self.fc = nn.Linear(self.num_features, num_classes)
        self._init_weights()

    def forward(self, x: Tensor, *, num_frames: int = 1) -> Tensor:
        return self.fc(self.pool(self.forward_features(x, num_frames=num_frames)))
