"""The model registry: one builder function per public name, added by `@register_model`.

Every model maps float clips (N, C, T, H, W) to logits (N, K) and reads T from its input, so the
clip shape may change between iterations; the image classifiers (`resnet50`, `alexnet_bn`, ...)
take an image as a one-frame clip. `build_model(ModelConfig)` is the only entry point the rest of
the package needs; `list_models()` names what exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import nn

from vidscale.models.i3d import (
    I3D_3X1X1,
    I3D_3X3X3,
    I3D_8X8,
    I3D_REFERENCE,
    REFERENCE_FC_STD,
    VolumeClassifier,
    i3d_non_local,
)
from vidscale.models.image import AlexNetBN, ImageResNet
from vidscale.models.nonlocal_block import NonLocalMode, NonLocalSpec
from vidscale.models.pretrained import load_pretrained
from vidscale.models.resnet import ResNet, TemporalSpec, temporal_resolutions
from vidscale.models.slowfast import (
    SLOW_TEMPORAL,
    SLOWFAST_4X16,
    SLOWFAST_4X16_MMACTION2,
    SLOWFAST_8X8,
    SLOWFAST_8X8_MMACTION2,
    SlowFast,
    SlowFastSpec,
)
from vidscale.models.temporal_shift import ShiftSpec
from vidscale.models.tsm import FrameClassifier


@dataclass
class ModelConfig:
    """Which network, its head, and its variant knobs.

    `frames` is the clip length a run feeds the model (benchmarks and data use it; the model
    itself takes T from its input). `pretrained` is a local torchvision ResNet state_dict file:
    loaded as-is for 2D trunks, inflated for I3D, conv1 adapted when `in_channels != 3` (e.g.
    20 for 10 stacked flow fields), fc re-initialised when the class count differs.
    `shift_div`, `shift_place` and `shift_every` configure TSM's shift (TSM models only);
    `temporal_pool` halves time after res2 (TSM and TSN only); the image classifiers
    (`resnet50`, `alexnet_bn`, ...) take neither, and their `dropout` precedes the classifier
    (AlexNet's: fc6 and fc7, as torchvision's). `init_from` then replaces the
    weights with a trained run's, the classifier only if the class counts agree
    (`vidscale.train.init_from`: AAVG §V's RGB-to-flow transfer, or fine-tuning).
    """

    name: str = "tsm_resnet50"
    num_classes: int = 400
    frames: int = 8
    dropout: float = 0.5
    pretrained: str | None = None
    in_channels: int = 3
    shift_div: int = 8
    shift_place: Literal["residual", "block"] = "residual"
    shift_every: int = 1
    temporal_pool: bool = False
    # A run directory (its last checkpoint), a checkpoint file in one, or RUN/best, RUN/epoch_0016;
    # "" = none. Applied when a run starts, never over a resumed run's own weights.
    init_from: str = ""


Builder = Callable[[ModelConfig], nn.Module]
MODELS: dict[str, Builder] = {}
_DEFAULT_FRAMES: dict[str, int] = {}
_DEFAULT_CLASSES: dict[str, int] = {}
KINETICS_CLASSES, IMAGENET_CLASSES = 400, 1000


def register_model(*, frames: int, classes: int = KINETICS_CLASSES) -> Callable[[Builder], Builder]:
    """Register the decorated builder under its function name; `frames` is the model's usual
    clip length (the paper's input frames), returned by `default_frames`; `classes` the class
    count of its usual dataset (Kinetics-400, ImageNet's 1000), by `default_num_classes`."""

    def add(builder: Builder) -> Builder:
        name = builder.__name__
        if name in MODELS:
            raise ValueError(f"model {name!r} is registered twice")
        MODELS[name] = builder
        _DEFAULT_FRAMES[name] = frames
        _DEFAULT_CLASSES[name] = classes
        return builder

    return add


def list_models() -> list[str]:
    return sorted(MODELS)


def _known(name: str) -> str:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(list_models())}")
    return name


def default_frames(name: str) -> int:
    """The clip length the model is defined with (TSM/TSN 8, I3D 3x3x3 16, I3D 3x1x1 32, the AAVG
    paper's TSN-ResNet-152 1)."""
    return _DEFAULT_FRAMES[_known(name)]


def default_num_classes(name: str) -> int:
    """The class count of the model's usual dataset: 1000 (ImageNet) for the image classifiers,
    400 (Kinetics-400) for the video models; what `vidscale info` reports by default."""
    return _DEFAULT_CLASSES[_known(name)]


def build_model(cfg: ModelConfig) -> nn.Module:
    """A freshly initialised (or ImageNet-initialised, `cfg.pretrained`) model on the CPU, or on
    the current default device (`with torch.device("meta")` builds a weightless one)."""
    builder = MODELS[_known(cfg.name)]
    if cfg.num_classes < 1 or cfg.in_channels < 1:
        raise ValueError(f"num_classes and in_channels must be >= 1: {cfg}")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {cfg.dropout}")
    return builder(cfg)


def stage_temporal_resolutions(model: nn.Module | ModelConfig, *, frames: int) -> dict[str, int]:
    """Frames at the output of conv1, pool1, res2, [pool2,] res3..res5 (TSM paper Table 2)."""
    if isinstance(model, ModelConfig):
        with torch.device("meta"):
            model = build_model(replace(model, pretrained=None))
    if isinstance(model, SlowFast | AlexNetBN):  # SlowFast: two trunks; AlexNet: none
        return model.temporal_resolutions(frames=frames)
    trunk = model if isinstance(model, ResNet) else getattr(model, "trunk", None)
    if not isinstance(trunk, ResNet):
        raise TypeError(f"{type(model).__name__} has no ResNet trunk")
    return temporal_resolutions(trunk.temporal, frames=frames)


def _trunk(
    cfg: ModelConfig,
    depth: int,
    temporal: TemporalSpec,
    shift: ShiftSpec | None,
    non_local: NonLocalSpec | None = None,
) -> ResNet:
    return ResNet(
        depth,
        num_classes=cfg.num_classes,
        in_channels=cfg.in_channels,
        temporal=temporal,
        shift=shift,
        non_local=non_local,
    )


def _frame_model(cfg: ModelConfig, *, depth: int, shift: ShiftSpec | None) -> nn.Module:
    temporal = TemporalSpec(pool2=(3, 2) if cfg.temporal_pool else (1, 1))
    trunk = _trunk(cfg, depth, temporal, shift)
    model = FrameClassifier(trunk, dropout=cfg.dropout)
    if cfg.pretrained:
        load_pretrained(trunk, path=cfg.pretrained)
    return model


def _volume_model(
    cfg: ModelConfig,
    temporal: TemporalSpec,
    non_local: NonLocalMode | None = None,
    *,
    fc_std: float = 0.001,
) -> nn.Module:
    if cfg.temporal_pool:
        raise ValueError(f"{cfg.name} has its own temporal pooling; temporal_pool must be False")
    trunk = _trunk(cfg, 50, temporal, None, None if non_local is None else i3d_non_local(non_local))
    model = VolumeClassifier(trunk, dropout=cfg.dropout, fc_std=fc_std)
    if cfg.pretrained:
        load_pretrained(trunk, path=cfg.pretrained)
    return model


def _tsm(cfg: ModelConfig, *, depth: int, causal: bool = False) -> nn.Module:
    shift = ShiftSpec(
        fold_div=cfg.shift_div, place=cfg.shift_place, every=cfg.shift_every, causal=causal
    )
    return _frame_model(cfg, depth=depth, shift=shift)


@register_model(frames=8)
def tsm_resnet18(cfg: ModelConfig) -> nn.Module:
    """TSM on ResNet-18 (the demo model)."""
    return _tsm(cfg, depth=18)


@register_model(frames=8)
def tsm_resnet34(cfg: ModelConfig) -> nn.Module:
    return _tsm(cfg, depth=34)


@register_model(frames=8)
def tsm_resnet50(cfg: ModelConfig) -> nn.Module:
    """TSM_8f of Table 1: 24,327,632 parameters and 33 GMACs per 8x224x224 clip (400 classes)."""
    return _tsm(cfg, depth=50)


@register_model(frames=8)
def tsm_resnet101(cfg: ModelConfig) -> nn.Module:
    return _tsm(cfg, depth=101)


@register_model(frames=8)
def online_tsm_resnet50(cfg: ModelConfig) -> nn.Module:
    """Causal TSM (past-only shift): trains on clips, runs frame by frame via `StreamingTSM`."""
    return _tsm(cfg, depth=50, causal=True)


@register_model(frames=8)
def tsn_resnet18(cfg: ModelConfig) -> nn.Module:
    """TSN: the same trunk without shift; an order-blind average of per-frame predictions."""
    return _frame_model(cfg, depth=18, shift=None)


@register_model(frames=8)
def tsn_resnet34(cfg: ModelConfig) -> nn.Module:
    return _frame_model(cfg, depth=34, shift=None)


@register_model(frames=8)
def tsn_resnet50(cfg: ModelConfig) -> nn.Module:
    return _frame_model(cfg, depth=50, shift=None)


@register_model(frames=8)
def tsn_resnet101(cfg: ModelConfig) -> nn.Module:
    return _frame_model(cfg, depth=101, shift=None)


@register_model(frames=1)
def tsn_resnet152(cfg: ModelConfig) -> nn.Module:
    """The two-stream RGB network of Cong et al. (AAVG, §II): ResNet-152 on one frame per sample
    (a TSN of one segment is a frame classifier; more frames are averaged as in any TSN)."""
    return _frame_model(cfg, depth=152, shift=None)


@register_model(frames=16)
def i3d_resnet50_3x3x3(cfg: ModelConfig) -> nn.Module:
    """I3D 3x3x3 of Table 1 (Hara et al.): ~47.0M parameters, ~40 GMACs per 16x224x224 clip."""
    return _volume_model(cfg, I3D_3X3X3)


@register_model(frames=32)
def i3d_resnet50_3x1x1(cfg: ModelConfig) -> nn.Module:
    """I3D 3x1x1 of Table 1 (Wang et al.): ~29.3M parameters, ~33 GMACs per 32x224x224 clip."""
    return _volume_model(cfg, I3D_3X1X1)


@register_model(frames=32)
def i3d_nl_resnet50_3x1x1(cfg: ModelConfig) -> nn.Module:
    """I3D-NL 3x1x1 (Wang et al. 2018, "Non-local Neural Networks"): `i3d_resnet50_3x1x1` and 5
    dot-product non-local blocks (MMAction2's `i3d_nl_dot_product_r50_32x2x1`); 36,413,648
    parameters (400 classes). An `i3d_resnet50_3x1x1` run loads into it, the blocks staying
    identities (`model.init_from`)."""
    return _volume_model(cfg, I3D_3X1X1, "dot_product")


@register_model(frames=32)
def i3d_nl_embedded_gaussian_resnet50_3x1x1(cfg: ModelConfig) -> nn.Module:
    """`i3d_nl_resnet50_3x1x1` with embedded-Gaussian (softmax) blocks, the paper's default form
    (MMAction2's `i3d_nl_embedded_gaussian_r50_32x2x1`); the same parameters."""
    return _volume_model(cfg, I3D_3X1X1, "embedded_gaussian")


@register_model(frames=32)
def i3d_resnet50_ref(cfg: ModelConfig) -> nn.Module:
    """The reference I3D R50 (Carreira & Zisserman's inflation as the non-local paper's code and
    MMAction2's `i3d_imagenet-pretrained-r50_8xb8-32x2x1` inflate it, `I3D_REFERENCE`):
    28,043,472 parameters and 33.13 GMACs per 32x224x224 clip (400 classes). Its tensors have
    the shapes of MMAction2's `ResNet3d` + `I3DHead`, one for one (a checkpoint maps by key);
    fc N(0, 0.01) as MMAction2's head. Not the TSM paper's Table 1 model (`i3d_resnet50_3x1x1`)."""
    return _volume_model(cfg, I3D_REFERENCE, fc_std=REFERENCE_FC_STD)


@register_model(frames=32)
def i3d_nl_resnet50_ref(cfg: ModelConfig) -> nn.Module:
    """I3D-NL R50 of Wang et al. 2018 ("Non-local Neural Networks"): `i3d_resnet50_ref` with 5
    dot-product non-local blocks after res3 blocks 1, 3 and res4 blocks 1, 3, 5, φ and g
    sub-sampled 1x2x2: MMAction2's `i3d_imagenet-pretrained-r50-nl-dot-product_8xb8-32x2x1`,
    35,397,840 parameters and 44.34 GMACs per 32x224x224 clip (400 classes), its tensors one for
    one. An `i3d_resnet50_ref` run loads into it, the blocks staying identities."""
    return _volume_model(cfg, I3D_REFERENCE, "dot_product", fc_std=REFERENCE_FC_STD)


@register_model(frames=32)
def i3d_nl_embedded_gaussian_resnet50_ref(cfg: ModelConfig) -> nn.Module:
    """`i3d_nl_resnet50_ref` with embedded-Gaussian (softmax, unscaled) blocks, the paper's
    default form and MMAction2's `...-r50-nl-embedded-gaussian_8xb8-32x2x1`; the same parameters
    and tensors (the pairwise function has none of its own)."""
    return _volume_model(cfg, I3D_REFERENCE, "embedded_gaussian", fc_std=REFERENCE_FC_STD)


@register_model(frames=8)
def i3d_resnet50_8x8(cfg: ModelConfig) -> nn.Module:
    """I3D 8x8 R50 of PySlowFast (config `Kinetics/c2/I3D_8x8_R50`, `MODEL.ARCH: i3d`) and
    PyTorchVideo (hub `i3d_r50`), for 8 frames at stride 8 (`I3D_8X8`): `i3d_resnet50_ref`'s
    kernels with conv1 5x7x7 at temporal stride 1 and a 2x1x1 max pool after res2 only;
    28,043,472 parameters (400 classes), fc N(0, 0.01) as PySlowFast's `FC_INIT_STD`."""
    return _volume_model(cfg, I3D_8X8, fc_std=REFERENCE_FC_STD)


@register_model(frames=8)
def slow_resnet50_8x8(cfg: ModelConfig) -> nn.Module:
    """Slow-only 8x8 R50 (SlowFast §4.1, Table 3's Slow-only): SlowFast's Slow pathway alone
    (`SLOW_TEMPORAL`: conv1 1x7x7, 3x1x1 first convs in res4 and res5 only, no temporal stride
    or pool), as PySlowFast builds it (config `Kinetics/c2/SLOW_8x8_R50`, `MODEL.ARCH: slow`)
    and PyTorchVideo (hub `slow_r50`); 32,454,096 parameters (400 classes), fc N(0, 0.01)."""
    return _volume_model(cfg, SLOW_TEMPORAL, fc_std=REFERENCE_FC_STD)


def _slowfast(cfg: ModelConfig, spec: SlowFastSpec) -> nn.Module:
    """SlowFast has no temporal shift, its own temporal structure, and no ImageNet start."""
    default = ModelConfig()
    shift = (cfg.shift_div, cfg.shift_place, cfg.shift_every)
    if shift != (default.shift_div, default.shift_place, default.shift_every):
        raise ValueError(f"{cfg.name} has no temporal shift; leave shift_div/place/every unset")
    if cfg.temporal_pool:
        raise ValueError(f"{cfg.name} keeps its frame rates; temporal_pool must be False")
    if cfg.pretrained:
        # A torchvision ResNet-50 fits neither pathway: the Fast one has 1/8 of its channels and
        # the Slow one's stage inputs carry the lateral channels. SlowFast trains from scratch.
        raise ValueError(
            f"{cfg.name} cannot load ImageNet ResNet weights ({cfg.pretrained}): its pathways "
            "do not have ResNet-50's shapes; SlowFast is trained from scratch (SlowFast §4)"
        )
    return SlowFast(
        spec, num_classes=cfg.num_classes, in_channels=cfg.in_channels, dropout=cfg.dropout
    )


@register_model(frames=32)
def slowfast_resnet50_4x16(cfg: ModelConfig) -> nn.Module:
    """SlowFast 4x16 R50 (α = 8, lateral kernel 5): 34.48M parameters (400 classes), 36.1
    GMACs per 32x256x256 clip as PySlowFast reports (27.6 GMACs at 224x224)."""
    return _slowfast(cfg, SLOWFAST_4X16)


@register_model(frames=32)
def slowfast_resnet50_8x8(cfg: ModelConfig) -> nn.Module:
    """SlowFast 8x8 R50 (α = 4, lateral kernel 7): 34.57M parameters (400 classes), 65.7
    GMACs per 32x256x256 clip as PySlowFast reports (50.3 GMACs at 224x224)."""
    return _slowfast(cfg, SLOWFAST_8X8)


@register_model(frames=32)
def slowfast_resnet50_4x16_mmaction2(cfg: ModelConfig) -> nn.Module:
    """SlowFast 4x16 R50 as MMAction2 builds it (`ResNet3dSlowFast` + `SlowFastHead`, config
    `slowfast_r50_8xb8-4x16x1-256e_kinetics400-rgb`; `SLOWFAST_4X16_MMACTION2`): laterals
    without BN/ReLU, Slow frames 0, 8, 16, 24, features concatenated Fast first. 34,479,288
    parameters (400 classes), its tensors one for one (`import-weights --format mmaction2`)."""
    return _slowfast(cfg, SLOWFAST_4X16_MMACTION2)


@register_model(frames=32)
def slowfast_resnet50_8x8_mmaction2(cfg: ModelConfig) -> nn.Module:
    """SlowFast 8x8 R50 as MMAction2 builds it (config
    `slowfast_r50_8xb8-8x8x1-256e_kinetics400-rgb`; `SLOWFAST_8X8_MMACTION2`): 34,565,560
    parameters (400 classes), its tensors one for one."""
    return _slowfast(cfg, SLOWFAST_8X8_MMACTION2)


def _still(cfg: ModelConfig) -> None:
    """An image classifier has no temporal structure to configure."""
    default = ModelConfig()
    shift = (cfg.shift_div, cfg.shift_place, cfg.shift_every)
    if shift != (default.shift_div, default.shift_place, default.shift_every) or cfg.temporal_pool:
        raise ValueError(
            f"{cfg.name} is an image classifier: leave shift_div/place/every and temporal_pool unset"
        )


def _image_resnet(cfg: ModelConfig, *, depth: int) -> nn.Module:
    _still(cfg)
    model = ImageResNet(
        depth, num_classes=cfg.num_classes, in_channels=cfg.in_channels, dropout=cfg.dropout
    )
    if cfg.pretrained:
        load_pretrained(model, path=cfg.pretrained)
    return model


@register_model(frames=1, classes=IMAGENET_CLASSES)
def resnet18(cfg: ModelConfig) -> nn.Module:
    """ResNet-18 for images (He et al. 2016; torchvision's keys): 11,689,512 parameters and
    1.81 GMACs per 224x224 image (1000 classes; 1.82 G counting BN, see `ImageResNet`)."""
    return _image_resnet(cfg, depth=18)


@register_model(frames=1, classes=IMAGENET_CLASSES)
def resnet34(cfg: ModelConfig) -> nn.Module:
    """ResNet-34 for images: 21,797,672 parameters, 3.66 GMACs per 224x224 image (1000 classes)."""
    return _image_resnet(cfg, depth=34)


@register_model(frames=1, classes=IMAGENET_CLASSES)
def resnet50(cfg: ModelConfig) -> nn.Module:
    """ResNet-50 for images (torchvision's v1.5, same keys and shapes): 25,557,032 parameters
    and 4.09 GMACs per 224x224 image (1000 classes; the 4.11 G often quoted counts BN too, see
    `ImageResNet`); the trunk of TSM/TSN-ResNet-50 and, inflated, of I3D (`vidscale export RUN
    --format trunk` writes it)."""
    return _image_resnet(cfg, depth=50)


@register_model(frames=1, classes=IMAGENET_CLASSES)
def resnet101(cfg: ModelConfig) -> nn.Module:
    """ResNet-101 for images: 44,549,160 parameters, 7.80 GMACs per 224x224 image (1000 classes)."""
    return _image_resnet(cfg, depth=101)


@register_model(frames=1, classes=IMAGENET_CLASSES)
def alexnet_bn(cfg: ModelConfig) -> nn.Module:
    """AlexNet-BN (LARS paper, You et al. 2017, §4): 61,119,528 parameters and 0.71 GMACs per
    224x224 image (1000 classes); BN after every conv and both hidden FCs (`AlexNetBN`). Trained
    from scratch: there is no torchvision-format checkpoint of it to load."""
    _still(cfg)
    if cfg.pretrained:
        raise ValueError(
            f"{cfg.name} cannot load {cfg.pretrained}: `pretrained` is a torchvision ResNet file"
        )
    return AlexNetBN(num_classes=cfg.num_classes, in_channels=cfg.in_channels, dropout=cfg.dropout)
