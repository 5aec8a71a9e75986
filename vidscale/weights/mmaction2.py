"""MMAction2 1.x checkpoints as vidscale weights: which models, their key tables, their clips.

A checkpoint of MMAction2 1.x (`Recognizer3D` or `Recognizer2D`, a `.pth` holding `state_dict`
and `meta`) loads into the vidscale model that is module for module the same network:

- `i3d_resnet50_ref`, `i3d_nl_resnet50_ref`, `i3d_nl_embedded_gaussian_resnet50_ref`:
  `ResNet3d` (`configs/_base_/models/i3d_r50.py`, the non-local configs' `NonLocal3d` with
  `sub_sample=True`, `use_scale=False`) and `I3DHead`;
- `tsn_resnet50`: `ResNet` (torchvision's v1.5 ResNet-50) and `TSNHead`. MMAction2's head
  averages the frames' pooled features and applies dropout and fc once; vidscale applies them per
  frame and averages the logits. The fc is linear, so in evaluation the two agree to rounding; in
  training the dropout masks differ (one per clip there, one per frame here);
- `tsm_resnet50`: `ResNetTSM` (shift "blockres": the residual branch's input, 1/8 of the
  channels one frame back and 1/8 one frame forward, in every block) and `TSMHead` (dropout and
  fc per frame, average consensus, as vidscale's `FrameClassifier`);
- `slowfast_resnet50_4x16_mmaction2`, `slowfast_resnet50_8x8_mmaction2`: `ResNet3dSlowFast`
  (two `ResNet3dPathway`s, laterals `conv1_lateral`, `layer{1,2,3}_lateral` of conv only) and
  `SlowFastHead` (`vidscale.models.slowfast`, `SLOWFAST_4X16_MMACTION2`). vidscale's
  `slowfast_resnet50_4x16`/`_8x8` follow PySlowFast, whose laterals have BN and ReLU.

The keys differ only by name (`vidscale_to_mmaction2`, one table for both directions: `convert`
reads it backwards for an import, `vidscale.weights.to_mmaction2` forwards for an export): a
`ConvModule`'s `conv`/`bn` are vidscale's `convN`/`bnN`, `cls_head.fc_cls` is `trunk.fc`, TSM's
shift wraps conv1 as `conv1.conv.net`. Every other vidscale model is refused with the reason
(`REFUSED`).

Input: MMAction2's `ActionDataPreprocessor` normalises RGB (decord decodes RGB) on the 0..255
scale with mean (123.675, 116.28, 103.53) and std (58.395, 57.12, 57.375), the numbers and the
order of vidscale's `data.transforms.IMAGENET_MEAN`/`IMAGENET_STD` for an RGB input, so the
imported model sees the values it was trained on.

Clips (the run's `data.eval_clip`, from each config's `test_pipeline`): I3D 32 frames at stride
2, short side 256, 10 clips x 3 crops of 256 (MMAction2's `ThreeCrop`), SlowFast the same 10 x 3 views of 32 frames at stride 2. TSN and TSM test with
`TenCrop` (4 corners and the centre, each flipped), which vidscale does not have: the nearest
is 3 crops of 224 after a short side of 256; TSN with 25 segments, TSM with its 8. MMAction2
averages the views' probabilities (`average_clips='prob'`): `vidscale eval --average softmax`
does the same. The training clip follows the config's train pipeline, for fine-tuning (SlowFast's:
`RandomResizedCrop`, vidscale's `crop="random_resized"`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from vidscale.data.clip import ClipSpec
from vidscale.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from vidscale.errors import InputError
from vidscale.weights.pth import load_pth, state_dict_of
from vidscale.weights.rename import rename_onto
from vidscale.weights.source import Source

FORMAT = "mmaction2"
PREPROCESSOR = "data_preprocessor."  # MMAction2's normalisation buffers, when saved

_I3D_TRAIN = ClipSpec(frames=32, sampling="dense", stride=2, scales=(1.0, 0.8))
_I3D_EVAL = ClipSpec(
    frames=32, sampling="dense", stride=2, crop_size=256, num_clips=10, num_crops=3, flip=False
)
_TSN_EVAL = ClipSpec(frames=25, num_crops=3, flip=False)
_TSM_EVAL = ClipSpec(frames=8, num_crops=3, flip=False)
_SLOWFAST_TRAIN = ClipSpec(frames=32, sampling="dense", stride=2, crop="random_resized")


_I3D_ZOO = "i3d_imagenet-pretrained-r50{}_8xb8-32x2x1-100e_kinetics400-rgb"
SOURCES: dict[str, Source] = {
    "i3d_resnet50_ref": Source((_I3D_ZOO.format(""),), 0.5, _I3D_TRAIN, _I3D_EVAL),
    "i3d_nl_resnet50_ref": Source(
        (_I3D_ZOO.format("-nl-dot-product"),), 0.5, _I3D_TRAIN, _I3D_EVAL
    ),
    "i3d_nl_embedded_gaussian_resnet50_ref": Source(
        (_I3D_ZOO.format("-nl-embedded-gaussian"),), 0.5, _I3D_TRAIN, _I3D_EVAL
    ),
    "tsn_resnet50": Source(
        ("tsn_imagenet-pretrained-r50_8xb32-1x1x8-100e_kinetics400-rgb",),
        0.4,
        ClipSpec(frames=8),
        _TSN_EVAL,
    ),
    "tsm_resnet50": Source(
        (
            "tsm_imagenet-pretrained-r50_8xb16-1x1x8-50e_kinetics400-rgb",
            "tsm_imagenet-pretrained-r50_8xb16-1x1x8-100e_kinetics400-rgb",
        ),
        0.5,
        ClipSpec(frames=8),
        _TSM_EVAL,
    ),
    "slowfast_resnet50_4x16_mmaction2": Source(
        ("slowfast_r50_8xb8-4x16x1-256e_kinetics400-rgb",), 0.5, _SLOWFAST_TRAIN, _I3D_EVAL
    ),
    "slowfast_resnet50_8x8_mmaction2": Source(
        (
            "slowfast_r50_8xb8-8x8x1-256e_kinetics400-rgb",
            "slowfast_r50_8xb8-8x8x1-steplr-256e_kinetics400-rgb",
        ),
        0.5,
        _SLOWFAST_TRAIN,
        _I3D_EVAL,
    ),
}

_TABLE1 = (
    "the TSM paper's Table 1 I3D inflates other blocks than MMAction2's ResNet3d "
    "(use i3d_{}resnet50_ref)"
)
_PYSLOWFAST = (
    "PySlowFast's layout: its laterals have BN and ReLU, MMAction2's are a conv alone "
    "(use slowfast_resnet50_{}_mmaction2)"
)
REFUSED: dict[str, str] = {
    "i3d_resnet50_3x1x1": _TABLE1.format(""),
    "i3d_nl_resnet50_3x1x1": _TABLE1.format("nl_"),
    "i3d_nl_embedded_gaussian_resnet50_3x1x1": _TABLE1.format("nl_embedded_gaussian_"),
    "i3d_resnet50_3x3x3": "its 3x3x3 convolutions have no MMAction2 I3D R50 counterpart",
    "online_tsm_resnet50": "its shift is causal; MMAction2's TSM shifts both ways",
    "tsm_resnet101": "MMAction2's ResNetTSM shifts every other block of a ResNet-101, "
    "vidscale's every block",
    "slowfast_resnet50_4x16": _PYSLOWFAST.format("4x16"),
    "slowfast_resnet50_8x8": _PYSLOWFAST.format("8x8"),
}


def refusal(name: str) -> str:
    """Why vidscale model `name` has no MMAction2 counterpart, and which models have one."""
    reason = REFUSED.get(name, "no conversion from MMAction2 is defined for it")
    return f"({reason}); covered: {', '.join(SOURCES)}"


def check_model(name: str) -> Source:
    """The MMAction2 source of vidscale model `name`; any other is an `InputError` saying why."""
    if name in SOURCES:
        return SOURCES[name]
    raise InputError(f"--model {name}: not importable from {FORMAT} {refusal(name)}")


# vidscale key -> MMAction2 key; applied in order, the first match wins.
_RENAMES = (
    (r"^trunk\.conv1\.", "backbone.conv1.conv."),
    (r"^trunk\.bn1\.", "backbone.conv1.bn."),
    (r"^trunk\.(layer\d\.\d+)\.conv(\d)\.", r"backbone.\1.conv\2.conv."),
    (r"^trunk\.(layer\d\.\d+)\.bn(\d)\.", r"backbone.\1.conv\2.bn."),
    (r"^trunk\.(layer\d\.\d+)\.downsample\.0\.", r"backbone.\1.downsample.conv."),
    (r"^trunk\.(layer\d\.\d+)\.downsample\.1\.", r"backbone.\1.downsample.bn."),
    (r"^trunk\.(layer\d\.\d+)\.non_local\.(g|phi)\.", r"backbone.\1.non_local_block.\2.0.conv."),
    (r"^trunk\.(layer\d\.\d+)\.non_local\.theta\.", r"backbone.\1.non_local_block.theta.conv."),
    (r"^trunk\.(layer\d\.\d+)\.non_local\.out\.", r"backbone.\1.non_local_block.conv_out.conv."),
    (r"^trunk\.(layer\d\.\d+)\.non_local\.out_bn\.", r"backbone.\1.non_local_block.conv_out.bn."),
    (r"^trunk\.fc\.", "cls_head.fc_cls."),
)
# ResNetTSM wraps each block's first conv in its shift: `conv1.conv` becomes `conv1.conv.net`.
_SHIFTED_CONV1 = (r"^(backbone\.layer\d\.\d+\.conv1\.conv)\.", r"\1.net.")


# SlowFast: each pathway is a trunk renamed as above under its own prefix; the laterals belong to
# MMAction2's Slow pathway, the one before res2 named after the stem, the others after the stage
# they follow (`lateral.1` comes after res2, MMAction2's `layer1`).
_PATHWAY = re.compile(r"^(slow|fast)\.(?!fc\.)")
_LATERALS = (
    (r"^lateral\.0\.conv\.", "backbone.slow_path.conv1_lateral.conv."),
    (r"^lateral\.([123])\.conv\.", r"backbone.slow_path.layer\1_lateral.conv."),
    (r"^fc\.", "cls_head.fc_cls."),
)


def vidscale_to_mmaction2(key: str, *, model: str) -> str:
    """The MMAction2 name of vidscale model `model`'s state_dict key (KeyError if none)."""
    if model.startswith("slowfast_"):
        return _slowfast_key(key)
    for pattern, replacement in _RENAMES:
        renamed, hits = re.subn(pattern, replacement, key)
        if hits:
            if model.startswith("tsm_"):
                renamed = re.sub(*_SHIFTED_CONV1, renamed)
            return renamed
    raise KeyError(key)


def _slowfast_key(key: str) -> str:
    """A SlowFast key's MMAction2 name: `slow.X` is `backbone.slow_path.` + trunk X's name."""
    pathway = _PATHWAY.match(key)
    if pathway:
        trunk_key = vidscale_to_mmaction2("trunk." + key[pathway.end() :], model="")
        return trunk_key.replace("backbone.", f"backbone.{pathway[1]}_path.", 1)
    for pattern, replacement in _LATERALS:
        renamed, hits = re.subn(pattern, replacement, key)
        if hits:
            return renamed
    raise KeyError(key)


def key_table(target: Mapping[str, Tensor], *, model: str) -> dict[str, str]:
    """MMAction2 key -> vidscale key for every tensor of `target` (a model's state_dict)."""
    return {vidscale_to_mmaction2(k, model=model): k for k in target}


def convert(
    state: Mapping[str, Tensor], target: Mapping[str, Tensor], *, model: str
) -> dict[str, Tensor]:
    """`state` (an MMAction2 `state_dict`) as vidscale model `model`'s state_dict, whose keys
    and shapes `target` gives; tensors keep their values and dtype is `target`'s.

    A checkpoint that does not fit is one `InputError` naming the first missing and unexpected
    MMAction2 keys and mismatched shapes.
    """
    table = key_table(target, model=model)
    check_preprocessor(state)
    given = {k: v for k, v in state.items() if not k.startswith(PREPROCESSOR)}
    return rename_onto(given, target, table, what=f"an MMAction2 {model}")


def check_preprocessor(state: Mapping[str, Tensor]) -> None:
    """Saved `data_preprocessor.mean`/`std` (MMAction2 keeps them out of the state_dict; older
    checkpoints may hold them) must be the RGB statistics vidscale normalises with."""
    expected = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD}
    for name, values in expected.items():
        saved = state.get(PREPROCESSOR + name)
        if saved is None:
            continue
        if not torch.allclose(saved.double().flatten(), torch.tensor(values, dtype=torch.float64)):
            raise InputError(
                f"{PREPROCESSOR}{name} is {saved.flatten().tolist()}, not the RGB {values} "
                "vidscale normalises with"
            )


def read(path: Path) -> dict[str, Tensor]:
    """The `.pth` file's state dict (its tensors only, see `vidscale.weights.pth`)."""
    return state_dict_of(load_pth(path), path)


def classes_in(state: Mapping[str, Tensor]) -> int:
    """The checkpoint's class count (rows of `cls_head.fc_cls.weight`)."""
    fc = state.get("cls_head.fc_cls.weight")
    if fc is None or fc.ndim != 2:
        raise InputError("not an MMAction2 recognizer checkpoint: no cls_head.fc_cls.weight")
    return int(fc.shape[0])
