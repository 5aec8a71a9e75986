"""PySlowFast checkpoints as vidscale weights: its `.pyth` files and its Caffe2 `.pkl` zoo files.

PySlowFast (github facebookresearch/SlowFast) is the reference implementation vidscale's
`SlowFast` follows module for module (`vidscale.models.slowfast`): the same stems, bottlenecks,
temporal kernels (`_TEMPORAL_KERNEL_BASIS["slowfast"]`), `FuseFastToSlow` laterals (conv, BN,
ReLU, concatenated after the Slow features) and head (dropout, `projection`), BN at eps 1e-5.
Covered: `slowfast_resnet50_4x16` and `slowfast_resnet50_8x8` (configs
`Kinetics/SLOWFAST_4x16_R50`, `Kinetics/SLOWFAST_8x8_R50` and their `c2/` twins), and its
one-pathway `ResNet` for `MODEL.ARCH` slow and i3d as `slow_resnet50_8x8` and
`i3d_resnet50_8x8` (`Kinetics/SLOW_8x8_R50`, `Kinetics/I3D_8x8_R50`, and `c2/`): the Slow
pathway alone, and `_TEMPORAL_KERNEL_BASIS["i3d"]` with a 2x1x1 max pool after res2
(`_POOL1["i3d"]`, a module without tensors), their keys `s1.pathway0_stem.*`,
`s{2..5}.pathway0_res{i}.*`, `head.projection.*`.

Files:

- `.pyth`, PySlowFast's own (`utils/checkpoint.py`, `save_checkpoint`): a torch file whose
  `model_state` names tensors by PySlowFast's modules (`s1.pathway0_stem.conv.weight`,
  `s1_fuse.conv_f2s.weight`, `s2.pathway1_res0.branch2.a_bn.running_var`,
  `head.projection.weight`; `vidscale_to_pyslowfast`);
- `.pkl`, the Caffe2 checkpoints of its Kinetics model zoo (its model zoo table, configs with
  `CHECKPOINT_TYPE: caffe2`): a Python 2 pickle of NumPy arrays under `blobs`, named as the
  Caffe2 nets named them (`res2_0_branch2a_w`, `t_res_conv1_bn_s`, `t_pool1_subsample_w`,
  `pred_w`; `vidscale_to_caffe2`, the names `utils/c2_model_loading.py` converts). Its BN
  blobs are scale, bias, running mean and running variance (`_s`, `_b`, `_rm`, `_riv`); the
  optimizer's blobs (`*_momentum`, `lr`, `model_iter`) are skipped, as PySlowFast's loader
  skips them. Reading it rebuilds NumPy arrays only (`vidscale.weights.c2_pickle`).

Input: PySlowFast normalises RGB (its decoders give RGB) on the 0..1 scale with mean 0.45 and
std 0.225 per channel (`slowfast/config/defaults.py`: `_C.DATA.MEAN`, `_C.DATA.STD`, which no
config here overrides); every source here says so (`DATA_MEAN`, `DATA_STD`), and the imported
run records them as its `data.mean`/`data.std`, so it is fed the input the model was trained on.

Clips (the configs' `DATA` and `TEST`): 32 frames at stride 2 (Slow and I3D: 8 at stride 8,
`EIGHT_BY_EIGHT_TRAIN`, `EIGHT_BY_EIGHT_EVAL`), training crops of 224 from a
short side jittered in [256, 320], 10 clips x 3 crops of 256 for evaluation. PySlowFast's head
pools 7x7 windows (its training crop / 32) at stride 1 and, in evaluation, averages the
softmax of each window; at 224-pixel crops that is one window, vidscale's global pool, and the
outputs agree; at 256 the res5 map is 8x8 and PySlowFast averages 4 overlapping windows' scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor

from vidscale.data.clip import ClipSpec
from vidscale.errors import InputError
from vidscale.models.resnet import ARCHS
from vidscale.weights import c2_pickle
from vidscale.weights.pth import load_pth
from vidscale.weights.rename import model_state, rename_onto, vidscale_parts
from vidscale.weights.source import Source, normalised_as, source_of

FORMAT = "pyslowfast"

# PySlowFast's SLOWFAST_*_R50 and SLOW/I3D_8x8_R50 configs: TRAIN_JITTER_SCALES [256, 320],
# TRAIN_CROP_SIZE 224, TEST_CROP_SIZE 256, NUM_ENSEMBLE_VIEWS 10, NUM_SPATIAL_CROPS 3.
SLOWFAST_TRAIN = ClipSpec(
    frames=32,
    sampling="dense",
    stride=2,
    crop="short_side_jitter",
    jitter=(256, 320),
    crop_size=224,
)
SLOWFAST_EVAL = ClipSpec(
    frames=32,
    sampling="dense",
    stride=2,
    crop_size=256,
    short_side=256,
    num_clips=10,
    num_crops=3,
    flip=False,
)
# SLOW_8x8_R50 and I3D_8x8_R50: NUM_FRAMES 8 at SAMPLING_RATE 8, the same crops and views.
EIGHT_BY_EIGHT_TRAIN = replace(SLOWFAST_TRAIN, frames=8, stride=8)
EIGHT_BY_EIGHT_EVAL = replace(SLOWFAST_EVAL, frames=8, stride=8)
DROPOUT = 0.5  # MODEL.DROPOUT_RATE of every config here
DATA_MEAN = (0.45, 0.45, 0.45)  # _C.DATA.MEAN, RGB on the 0..1 scale
DATA_STD = (0.225, 0.225, 0.225)  # _C.DATA.STD

SOURCES: dict[str, Source] = {
    "slowfast_resnet50_4x16": Source(
        ("Kinetics/SLOWFAST_4x16_R50", "Kinetics/c2/SLOWFAST_4x16_R50"),
        DROPOUT,
        SLOWFAST_TRAIN,
        SLOWFAST_EVAL,
    ),
    "slowfast_resnet50_8x8": Source(
        ("Kinetics/SLOWFAST_8x8_R50", "Kinetics/c2/SLOWFAST_8x8_R50"),
        DROPOUT,
        SLOWFAST_TRAIN,
        SLOWFAST_EVAL,
    ),
    "slow_resnet50_8x8": Source(
        ("Kinetics/SLOW_8x8_R50", "Kinetics/c2/SLOW_8x8_R50"),
        DROPOUT,
        EIGHT_BY_EIGHT_TRAIN,
        EIGHT_BY_EIGHT_EVAL,
    ),
    "i3d_resnet50_8x8": Source(
        ("Kinetics/I3D_8x8_R50", "Kinetics/c2/I3D_8x8_R50"),
        DROPOUT,
        EIGHT_BY_EIGHT_TRAIN,
        EIGHT_BY_EIGHT_EVAL,
    ),
}
SOURCES = normalised_as(SOURCES, mean=DATA_MEAN, std=DATA_STD)

# PySlowFast's `nonlocal_helper.Nonlocal` differs from vidscale's (MMAction2's) block in three
# ways, one of them in what is computed rather than in a constant: a max-pool of the input
# before φ and g does not equal a max-pool of their outputs (a 1x1 conv does not commute with
# a max).
_NON_LOCAL = (
    "PySlowFast's non-local blocks (I3D_NLN_8x8_R50) scale the softmax affinities by "
    "1/sqrt(C), give conv_out a bias and max-pool the input before phi and g; vidscale's "
    "(MMAction2's) do none of these, pooling phi's and g's outputs"
)
_MMACTION2_SLOWFAST = (
    "MMAction2's SlowFast variant (laterals without BN, strided Slow frames); "
    "use slowfast_resnet50_{}"
)
REFUSED: dict[str, str] = {
    "i3d_nl_resnet50_ref": _NON_LOCAL,
    "i3d_nl_embedded_gaussian_resnet50_ref": _NON_LOCAL,
    "i3d_resnet50_ref": "its stem strides time by 2 (MMAction2's 32x2 clips); "
    "PySlowFast's I3D_8x8_R50 does not: use i3d_resnet50_8x8",
    "slowfast_resnet50_4x16_mmaction2": _MMACTION2_SLOWFAST.format("4x16"),
    "slowfast_resnet50_8x8_mmaction2": _MMACTION2_SLOWFAST.format("8x8"),
}


def check_model(name: str) -> Source:
    """The PySlowFast source of vidscale model `name`; any other is an `InputError` saying why."""
    otherwise = "no conversion from PySlowFast is defined for it"
    return source_of(name, fmt=FORMAT, sources=SOURCES, refused=REFUSED, otherwise=otherwise)


# vidscale block module -> PySlowFast's (`resnet_helper.ResBlock`, `BottleneckTransform`).
_BLOCK = {
    "conv1": "branch2.a",
    "bn1": "branch2.a_bn",
    "conv2": "branch2.b",
    "bn2": "branch2.b_bn",
    "conv3": "branch2.c",
    "bn3": "branch2.c_bn",
    "downsample.0": "branch1",
    "downsample.1": "branch1_bn",
}


def vidscale_to_pyslowfast(key: str) -> str:
    """The PySlowFast `.pyth` name of a volume ResNet's or SlowFast's key (KeyError if none):
    stage s of vidscale (layer1..4) is PySlowFast's `s{s+1}`, pathway 0 Slow, 1 Fast."""
    p = vidscale_parts(key)
    if p.place == "stem":
        return f"s1.pathway{p.pathway}_stem.{p.module}.{p.param}"
    if p.place == "block":
        return f"s{p.stage + 1}.pathway{p.pathway}_res{p.block}.{_BLOCK[p.module]}.{p.param}"
    if p.place == "lateral":
        module = "conv_f2s" if p.module == "conv" else "bn"
        return f"s{p.stage + 1}_fuse.{module}.{p.param}"
    return f"head.projection.{p.param}"


# torch parameter -> the suffix of a Caffe2 blob (BN: SpatialBN's scale, bias, running stats).
_C2_PARAM = {"weight": "w", "bias": "b"}
_C2_BN = {"weight": "s", "bias": "b", "running_mean": "rm", "running_var": "riv"}
_C2_BRANCH = {"conv1": "2a", "conv2": "2b", "conv3": "2c", "downsample.0": "1"}
_C2_BRANCH_BN = {"bn1": "2a", "bn2": "2b", "bn3": "2c", "downsample.1": "1"}


def _c2_param(module: str, param: str) -> str:
    is_bn = module.startswith("bn") or module == "downsample.1"
    return f"bn_{_C2_BN[param]}" if is_bn else _C2_PARAM[param]


def vidscale_to_caffe2(key: str) -> str | None:
    """The Caffe2 blob of a volume ResNet's or SlowFast's key; None for a BN's
    `num_batches_tracked` (Caffe2 keeps no count); KeyError for any other key.

    The Fast pathway's blobs start with `t_`; the lateral before res(s+2) is named after the
    Fast blob it reads: `t_pool1_subsample` (the stem's output) and
    `t_res{s+1}_{last block}_branch2c_bn_subsample` (a stage's output).
    """
    p = vidscale_parts(key)
    if p.param == "num_batches_tracked":
        return None
    t = "t_" if p.pathway == 1 else ""
    if p.place == "stem":
        return (
            f"{t}conv1_{_C2_PARAM[p.param]}"
            if p.module == "conv"
            else (f"{t}res_conv1_bn_{_C2_BN[p.param]}")
        )
    if p.place == "block":
        branch = _C2_BRANCH.get(p.module) or _C2_BRANCH_BN[p.module]
        return f"{t}res{p.stage + 1}_{p.block}_branch{branch}_{_c2_param(p.module, p.param)}"
    if p.place == "lateral":
        last = ARCHS[50][1][p.stage - 1] - 1 if p.stage else 0
        source = f"t_res{p.stage + 1}_{last}_branch2c_bn" if p.stage else "t_pool1"
        param = _C2_BN[p.param] if p.module == "bn" else _C2_PARAM[p.param]
        return f"{source}_subsample_{'bn_' if p.module == 'bn' else ''}{param}"
    return f"pred_{_C2_PARAM[p.param]}"


def _is_caffe2(state: Mapping[str, Tensor]) -> bool:
    return "pred_w" in state


def _c2_bookkeeping(key: str) -> bool:
    """An optimizer blob PySlowFast's Caffe2 loader skips (`checkpoint.load_checkpoint`)."""
    return any(part in key for part in ("momentum", "lr", "model_iter"))


def convert(
    state: Mapping[str, Tensor], target: Mapping[str, Tensor], *, model: str
) -> dict[str, Tensor]:
    """`state` (a `.pyth`'s `model_state` or a `.pkl`'s blobs) as vidscale model `model`'s
    state_dict, whose keys and shapes `target` gives; values kept, dtypes `target`'s. A file
    that does not fit is one `InputError` naming the first missing and unexpected keys and
    mismatched shapes."""
    del model  # every covered model's keys follow from their parts
    if not _is_caffe2(state):
        table = {vidscale_to_pyslowfast(k): k for k in target}
        return rename_onto(state, target, table, what=f"a PySlowFast {FORMAT} .pyth")
    names = {k: vidscale_to_caffe2(k) for k in target}
    c2_table = {c2: k for k, c2 in names.items() if c2 is not None}
    counts = {k: torch.zeros((), dtype=torch.long) for k, c2 in names.items() if c2 is None}
    given = {k: v for k, v in state.items() if k in c2_table or not _c2_bookkeeping(k)}
    return rename_onto(given, target, c2_table, what="a PySlowFast Caffe2 .pkl", defaults=counts)


def read(path: Path) -> dict[str, Tensor]:
    """A `.pkl` file's Caffe2 blobs (`c2_pickle.read_blobs`), else a `.pyth` file's
    `model_state` (its tensors only, `vidscale.weights.pth`)."""
    if path.suffix == ".pkl":
        return c2_pickle.read_blobs(path)
    return model_state(load_pth(path), path, what="PySlowFast")


def classes_in(state: Mapping[str, Tensor]) -> int:
    """The checkpoint's class count (rows of `head.projection.weight`, Caffe2's `pred_w`)."""
    fc = state.get("pred_w" if _is_caffe2(state) else "head.projection.weight")
    if fc is None or fc.ndim != 2:
        raise InputError(
            "not a PySlowFast classifier checkpoint: no head.projection.weight (.pyth) or "
            "pred_w (Caffe2 .pkl)"
        )
    return int(fc.shape[0])
