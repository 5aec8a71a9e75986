"""PyTorchVideo 0.1.5 hub checkpoints as vidscale weights.

PyTorchVideo's hub (`pytorchvideo/models/hub/slowfast.py`) publishes `SLOWFAST_8x8_R50.pyth`
for `slowfast_r50`, and its model zoo `SLOWFAST_4x16_R50.pyth` (the same builder with a 5x1x1
lateral at temporal stride 8, vidscale's `slowfast_resnet50_4x16`): a torch file whose `model_state` names tensors by PyTorchVideo's modules
(`vidscale_to_pytorchvideo`). Its `create_slowfast` builds PySlowFast's SlowFast module for
module, and so vidscale's `slowfast_resnet50_8x8` (`vidscale.models.slowfast`): stems
`blocks.0.multipathway_blocks.{0,1}` (1x7x7 and 5x7x7 convs, BN, ReLU, 1x3x3 max pool),
bottlenecks `res_blocks.i.branch2.conv_{a,b,c}` with the temporal kernel on `conv_a` (Slow:
res4 and res5 only; Fast: everywhere) and the spatial stride on `conv_b`, shortcut
`branch1_conv`/`branch1_norm`, laterals `multipathway_fusion` (a 7x1x1 conv at temporal stride
4, BN, ReLU, concatenated after the Slow features), BN at eps 1e-5, and the head
`blocks.6` (dropout 0.5, `proj` with bias). The hub's input transform (`PackPathway`) picks the
Slow frames by `linspace(0, T - 1, T // 4)`, as vidscale does.

Its `hub/resnet.py` publishes `SLOW_8x8_R50.pyth` for `slow_r50` and `I3D_8x8_R50.pyth` for
`i3d_r50`, both `create_resnet` (PySlowFast's one-pathway `ResNet`): `slow_r50` is the SlowFast
Slow pathway alone, vidscale's `slow_resnet50_8x8`; `i3d_r50` has a 5x7x7 stem at temporal
stride 1, `conv_a` kernels 3x1x1 cycling (3), (3, 1), (3, 1), (1, 3) over res2..res5 and a
2x1x1 `stage1_pool` after res2, vidscale's `i3d_resnet50_8x8`. Their keys: stem `blocks.0`,
res2..res5 `blocks.1..4` (`i3d_r50`: 1, 3, 4, 5, its pool being block 2), head `blocks.5`
(`i3d_r50`: 6).

The head pools each pathway with a fixed `AvgPool3d` of (frames, 7, 7) at stride 1, then
projects and averages what is left: at 224-pixel crops that is vidscale's global pool (the
outputs agree); at the 256-pixel crops of the zoo's evaluation it averages 4 overlapping 7x7
windows of the 8x8 res5 map, which vidscale's global average weights differently.

Input: PyTorchVideo's hub transform normalises RGB on the 0..1 scale with mean 0.45 and std
0.225 per channel (its tutorial `website/docs/tutorial_torchhub_inference.md`: mean [0.45,
0.45, 0.45] and std [0.225, 0.225, 0.225], applied by `NormalizeVideo` after `x / 255.0`),
PySlowFast's `_C.DATA.MEAN` and `_C.DATA.STD` (`pyslowfast.DATA_MEAN`, `DATA_STD`); every source
here says so, and the imported run records them as its `data.mean`/`data.std`.

Clips: the PySlowFast config the checkpoint was trained with (`pyslowfast.SLOWFAST_TRAIN`,
`SLOWFAST_EVAL`; Slow and I3D `EIGHT_BY_EIGHT_TRAIN`, `EIGHT_BY_EIGHT_EVAL`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from torch import Tensor

from vidscale.errors import InputError
from vidscale.weights import pyslowfast
from vidscale.weights.pth import load_pth
from vidscale.weights.rename import model_state, rename_onto, vidscale_parts
from vidscale.weights.source import Source, normalised_as, source_of

FORMAT = "pytorchvideo"

SOURCES: dict[str, Source] = {
    "slowfast_resnet50_4x16": Source(
        ("SLOWFAST_4x16_R50",),
        pyslowfast.DROPOUT,
        pyslowfast.SLOWFAST_TRAIN,
        pyslowfast.SLOWFAST_EVAL,
    ),
    "slowfast_resnet50_8x8": Source(
        ("slowfast_r50", "SLOWFAST_8x8_R50"),
        pyslowfast.DROPOUT,
        pyslowfast.SLOWFAST_TRAIN,
        pyslowfast.SLOWFAST_EVAL,
    ),
    "slow_resnet50_8x8": Source(
        ("slow_r50", "SLOW_8x8_R50"),
        pyslowfast.DROPOUT,
        pyslowfast.EIGHT_BY_EIGHT_TRAIN,
        pyslowfast.EIGHT_BY_EIGHT_EVAL,
    ),
    "i3d_resnet50_8x8": Source(
        ("i3d_r50", "I3D_8x8_R50"),
        pyslowfast.DROPOUT,
        pyslowfast.EIGHT_BY_EIGHT_TRAIN,
        pyslowfast.EIGHT_BY_EIGHT_EVAL,
    ),
}
SOURCES = normalised_as(SOURCES, mean=pyslowfast.DATA_MEAN, std=pyslowfast.DATA_STD)

REFUSED: dict[str, str] = dict(pyslowfast.REFUSED)


def check_model(name: str) -> Source:
    """The hub model of vidscale model `name`; any other is an `InputError` saying why."""
    otherwise = "no conversion from PyTorchVideo is defined for it"
    return source_of(name, fmt=FORMAT, sources=SOURCES, refused=REFUSED, otherwise=otherwise)


# vidscale block module -> PyTorchVideo's (`models/resnet.py`: `ResBlock`, `BottleneckBlock`).
_BLOCK = {
    "conv1": "branch2.conv_a",
    "bn1": "branch2.norm_a",
    "conv2": "branch2.conv_b",
    "bn2": "branch2.norm_b",
    "conv3": "branch2.conv_c",
    "bn3": "branch2.norm_c",
    "downsample.0": "branch1_conv",
    "downsample.1": "branch1_norm",
}
# `create_slowfast`'s blocks: 0 stems + fusion, 1..4 res2..res5 (+ fusion), 5 pooling, 6 head;
# `create_resnet`'s: 0 stem, 1..4 res2..res5, 5 head, except that a `stage1_pool` (`i3d_r50`'s
# 2x1x1 max pool after res2) is block 2 and moves res3..res5 and the head up one.
_HEAD_BLOCK = {True: 6, False: 5}
_STAGE1_POOL = frozenset({"i3d_resnet50_8x8"})


def vidscale_to_pytorchvideo(key: str, *, model: str) -> str:
    """The PyTorchVideo name of vidscale model `model`'s key (KeyError if none): SlowFast's
    pathways are `multipathway_blocks.{0,1}` inside each of `blocks.0..4`; a one-pathway
    ResNet's stages are `blocks.1..4`, or 1, 3, 4, 5 behind `i3d_r50`'s pool."""
    p = vidscale_parts(key)
    multi = model.startswith("slowfast_")
    path = f".multipathway_blocks.{p.pathway}" if multi else ""
    shift = int(model in _STAGE1_POOL)
    if p.place == "stem":
        module = "conv" if p.module == "conv" else "norm"
        return f"blocks.0{path}.{module}.{p.param}"
    if p.place == "block":
        stage = p.stage + shift * (p.stage > 1)
        return f"blocks.{stage}{path}.res_blocks.{p.block}.{_BLOCK[p.module]}.{p.param}"
    if p.place == "lateral":
        module = "conv_fast_to_slow" if p.module == "conv" else "norm"
        return f"blocks.{p.stage}.multipathway_fusion.{module}.{p.param}"
    return f"blocks.{_HEAD_BLOCK[multi] + shift}.proj.{p.param}"


def convert(
    state: Mapping[str, Tensor], target: Mapping[str, Tensor], *, model: str
) -> dict[str, Tensor]:
    """`state` (a hub `model_state`) as vidscale model `model`'s state_dict, whose keys and
    shapes `target` gives; values kept, dtypes `target`'s. A file that does not fit is one
    `InputError` naming the first missing and unexpected keys and mismatched shapes."""
    table = {vidscale_to_pytorchvideo(k, model=model): k for k in target}
    return rename_onto(state, target, table, what=f"a PyTorchVideo {SOURCES[model].configs[0]}")


def read(path: Path) -> dict[str, Tensor]:
    """The `.pyth` file's `model_state` (its tensors only, see `vidscale.weights.pth`)."""
    return model_state(load_pth(path), path, what="PyTorchVideo hub")


def classes_in(state: Mapping[str, Tensor]) -> int:
    """The checkpoint's class count (rows of the head's `proj.weight`)."""
    for head in _HEAD_BLOCK.values():
        fc = state.get(f"blocks.{head}.proj.weight")
        if fc is not None and fc.ndim == 2:
            return int(fc.shape[0])
    raise InputError("not a PyTorchVideo classifier checkpoint: no blocks.5/6.proj.weight")
