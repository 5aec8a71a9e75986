"""Checkpoints of the TSM authors' code (github mit-han-lab/temporal-shift-module) as vidscale
weights: which models, their key table, their clips.

Their `main.py` saves `{"epoch", "arch", "state_dict", "best_prec1"}` (as `.pth.tar`; the model
zoo's `.pth` files hold the same) of `ops/models.py`'s `TSN` wrapped in `nn.DataParallel`, so
every key starts with `module.`; a file saved without the wrapper has no prefix, and both load.
`TSN` holds a torchvision ResNet as `base_model` and, with dropout (`--dropout 0.5` in their
Kinetics scripts), replaces its fc by the dropout and adds the classifier as `new_fc`
(`_prepare_tsn`); with dropout 0 the classifier stays `base_model.fc`, read as the same tensor.
Each frame goes through the trunk, dropout and `new_fc`; the consensus averages the frames'
logits ("avg"): vidscale's `FrameClassifier`, the trunk under torchvision's names.

- `tsm_resnet50`: `is_shift` with `shift_place="blockres"`, `shift_div=8`
  (`ops/temporal_shift.py`, `make_temporal_shift`): every bottleneck's conv1 is wrapped in
  `TemporalShift`, so its weight is `conv1.net.weight`; the shift moves channels [0, C/8) one
  frame back (frame t takes t+1's) and [C/8, C/4) one frame forward (t takes t-1's), zeros at
  the ends: vidscale's shift (`models/temporal_shift.py`), the one MMAction2's `ResNetTSM`
  ported, on which `tsm_resnet50`'s MMAction2 import is proven.
- `tsn_resnet50`: their TSN baseline (`TSM_kinetics_RGB_resnet50_avg_segment5_e50`): no shift.

Refused, with the reason (`REFUSED`): a ResNet-101 (`make_temporal_shift` shifts every other
block once layer3 has 23 or more), the causal `online_tsm_resnet50`, and every other model.
Non-local (`_nl`) and flow checkpoints fail as another network's, naming their keys.

Input: `GroupNormalize(input_mean, input_std)` after `ToTorchFormatTensor` (0..1) on PIL RGB
frames, with ImageNet's (0.485, 0.456, 0.406) and (0.229, 0.224, 0.225): on the 0..255 scale
vidscale's `IMAGENET_MEAN`/`IMAGENET_STD` in the same order.

Clips (`test_models.py`, script `test_tsm_kinetics_rgb_8f.sh`): 8 segments sampled uniformly,
short side 256 (`scale_size`), one 224 centre crop, 1 clip; training (`main.py`): TSN's
segments with `GroupMultiScaleCrop(224, [1, .875, .75, .66])` and a flip, vidscale's default
`ClipSpec`. The dense zoo file (`..._e100_dense`) was tested with 10 dense clips x 3 crops of
256 (`--dense_sample --full_res --test_crops=3`): `vidscale eval --paper-views` with
`--set data.eval_clip.sampling=dense`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from torch import Tensor

from vidscale.data.clip import ClipSpec
from vidscale.errors import InputError
from vidscale.weights.pth import load_pth, state_dict_of
from vidscale.weights.rename import rename_onto, vidscale_parts
from vidscale.weights.source import Source, source_of

FORMAT = "tsm"
WRAPPER = "module."  # nn.DataParallel's prefix, on every key of a file `main.py` saves
CLASSIFIER = "new_fc."
_NO_DROPOUT_FC = "base_model.fc."  # the classifier's name when trained with dropout 0

_ZOO = "TSM_kinetics_RGB_resnet50_{}"
SOURCES: dict[str, Source] = {
    "tsm_resnet50": Source(
        (
            _ZOO.format("shift8_blockres_avg_segment8_e50"),
            _ZOO.format("shift8_blockres_avg_segment8_e100_dense"),
        ),
        0.5,
        ClipSpec(frames=8),
        ClipSpec(frames=8),
    ),
    "tsn_resnet50": Source(
        (_ZOO.format("avg_segment5_e50"),), 0.5, ClipSpec(frames=5), ClipSpec(frames=8)
    ),
}

REFUSED: dict[str, str] = {
    "tsm_resnet101": "the TSM code shifts every other block of a ResNet-101, vidscale's "
    "tsm_resnet101 every block",
    "online_tsm_resnet50": "its shift is causal; the TSM code's offline models shift both ways",
}


def check_model(name: str) -> Source:
    """The TSM-code source of vidscale model `name`; any other is an `InputError` saying why."""
    otherwise = "no conversion from the TSM code's checkpoints is defined for it"
    return source_of(name, fmt=FORMAT, sources=SOURCES, refused=REFUSED, otherwise=otherwise)


def vidscale_to_tsm(key: str, *, model: str) -> str:
    """The TSM code's name (without `module.`) of vidscale model `model`'s state_dict key: the
    torchvision trunk under `base_model.`, shifted convs as `conv1.net`, fc as `new_fc`
    (KeyError for a key of no frame ResNet)."""
    parts = vidscale_parts(key)
    if parts.place == "head":
        return CLASSIFIER + parts.param
    name = "base_model." + key.removeprefix("trunk.")
    if parts.place == "block" and parts.module == "conv1" and model.startswith("tsm_"):
        name = name.replace(".conv1.", ".conv1.net.")
    return name


def convert(
    state: Mapping[str, Tensor], target: Mapping[str, Tensor], *, model: str
) -> dict[str, Tensor]:
    """`state` (`read`'s, without `module.`) as vidscale model `model`'s state_dict, whose keys
    and shapes `target` gives; values kept, dtypes `target`'s. A file that does not fit is one
    `InputError` naming the first missing and unexpected keys and mismatched shapes."""
    table = {vidscale_to_tsm(k, model=model): k for k in target}
    return rename_onto(state, target, table, what=f"a TSM-code {model}")


def read(path: Path) -> dict[str, Tensor]:
    """The file's `state_dict` (tensors only, `vidscale.weights.pth`), `module.` removed where
    every key has it, a dropout-free classifier renamed `new_fc`."""
    state = state_dict_of(load_pth(path), path)
    if all(k.startswith(WRAPPER) for k in state):
        state = {k.removeprefix(WRAPPER): v for k, v in state.items()}
    if not any(k.startswith(CLASSIFIER) for k in state):
        state = {
            CLASSIFIER + k.removeprefix(_NO_DROPOUT_FC) if k.startswith(_NO_DROPOUT_FC) else k: v
            for k, v in state.items()
        }
    return state


def classes_in(state: Mapping[str, Tensor]) -> int:
    """The checkpoint's class count (rows of `new_fc.weight`)."""
    fc = state.get(CLASSIFIER + "weight")
    if fc is None or fc.ndim != 2:
        raise InputError("not a TSM-code checkpoint: no new_fc.weight (nor base_model.fc.weight)")
    return int(fc.shape[0])
