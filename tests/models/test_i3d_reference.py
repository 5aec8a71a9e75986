"""The reference I3D and I3D-NL R50 (Wang et al., "Non-local Neural Networks", CVPR 2018)
against MMAction2's modules, tensor for tensor.

MMAction2 1.2's `ResNet3d` built from `configs/_base_/models/i3d_r50.py` (`inflate` below,
`conv1_kernel=(5, 7, 7)`), the I3D-NL configs' `non_local` and `non_local_cfg` (`NonLocal3d`
with `sub_sample=True`, BN3d after `conv_out`) and its `I3DHead` (fc with bias) are written down
here as a table of state_dict keys and shapes (`mmaction2_shapes`). Renaming vidscale's keys
(`weights.mmaction2.vidscale_to_mmaction2`) must give exactly that table: a checkpoint importer is then a key mapping
only. The table was checked against the state_dict of MMAction2 1.2 built from those configs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import pytest
import torch
from torch import nn

from vidscale.bench.compute.flops import model_info
from vidscale.models.i3d import I3D_NL_PLACEMENT, I3D_REFERENCE
from vidscale.models.nonlocal_block import NonLocalBlock
from vidscale.models.registry import ModelConfig, build_model, default_frames
from vidscale.models.resnet import Bottleneck, ResNet
from vidscale.weights.mmaction2 import vidscale_to_mmaction2

Shape = tuple[int, ...]
Flags = tuple[tuple[int, ...], ...]

REFERENCE_I3D = "i3d_resnet50_ref"
REFERENCE_NL = ("i3d_nl_resnet50_ref", "i3d_nl_embedded_gaussian_resnet50_ref")
REFERENCE_MODELS = (REFERENCE_I3D, *REFERENCE_NL)

# MMAction2's I3D R50 and I3D-NL R50 configs, as published.
MMACTION2_INFLATE: Flags = ((1, 1, 1), (1, 0, 1, 0), (1, 0, 1, 0, 1, 0), (0, 1, 0))
MMACTION2_NON_LOCAL: Flags = ((0, 0, 0), (0, 1, 0, 1), (0, 1, 0, 1, 0, 1), (0, 0, 0))
NO_NON_LOCAL: Flags = tuple(tuple(0 for _ in stage) for stage in MMACTION2_NON_LOCAL)
MMACTION2_CONV1_KERNEL = (5, 7, 7)
STAGE_PLANES = (64, 128, 256, 512)
BN_TENSORS = ("weight", "bias", "running_mean", "running_var")

# Per stage: (blocks whose first conv is 3x1x1, blocks whose first conv is 1x1x1, non-local
# blocks). The compact form of the table below.
REFERENCE_STAGES = ((3, 0, 0), (2, 2, 2), (3, 3, 3), (1, 2, 0))

# Parameters at 400 classes (MMAction2's metafile: 28.0M and 35.4M; these are its models' exact
# counts) and MACs per 32x224x224 clip (`vidscale info`: convolutions, fc and, with non-local
# blocks, the attention's two batched products).
PARAMS = {REFERENCE_I3D: 28_043_472, **dict.fromkeys(REFERENCE_NL, 35_397_840)}
MACS_224 = {REFERENCE_I3D: 33_128_218_624, **dict.fromkeys(REFERENCE_NL, 44_338_741_248)}
TABLE1_PARAMS = {"i3d_resnet50_3x1x1": 29_059_280, "i3d_nl_resnet50_3x1x1": 36_413_648}


def _conv_bn(prefix: str, cout: int, cin: int, kernel: Shape) -> dict[str, Shape]:
    """An MMAction2 `ConvModule` with BN3d: a bias-free conv and a BN."""
    shapes: dict[str, Shape] = {f"{prefix}.conv.weight": (cout, cin, *kernel)}
    shapes |= {f"{prefix}.bn.{name}": (cout,) for name in BN_TENSORS}
    shapes[f"{prefix}.bn.num_batches_tracked"] = ()
    return shapes


def _non_local(prefix: str, channels: int) -> dict[str, Shape]:
    """MMAction2's `NonLocal3d(sub_sample=True)`: g and phi are `Sequential(conv, max-pool)`."""
    inner = channels // 2
    shapes: dict[str, Shape] = {}
    for name in ("g.0", "theta", "phi.0"):
        shapes[f"{prefix}.{name}.conv.weight"] = (inner, channels, 1, 1, 1)
        shapes[f"{prefix}.{name}.conv.bias"] = (inner,)
    return shapes | _conv_bn(f"{prefix}.conv_out", channels, inner, (1, 1, 1))


def mmaction2_shapes(*, num_classes: int, non_local: Flags) -> dict[str, Shape]:
    """State_dict keys and shapes of MMAction2's `Recognizer3D` with this backbone and head."""
    shapes = _conv_bn("backbone.conv1", 64, 3, MMACTION2_CONV1_KERNEL)
    cin = 64
    for s, (planes, inflate) in enumerate(zip(STAGE_PLANES, MMACTION2_INFLATE, strict=True)):
        for i, inflated in enumerate(inflate):
            block, cout = f"backbone.layer{s + 1}.{i}", planes * 4
            shapes |= _conv_bn(f"{block}.conv1", planes, cin, (3 if inflated else 1, 1, 1))
            shapes |= _conv_bn(f"{block}.conv2", planes, planes, (1, 3, 3))
            shapes |= _conv_bn(f"{block}.conv3", cout, planes, (1, 1, 1))
            if i == 0:
                shapes |= _conv_bn(f"{block}.downsample", cout, cin, (1, 1, 1))
            if non_local[s][i]:
                shapes |= _non_local(f"{block}.non_local_block", cout)
            cin = cout
    shapes["cls_head.fc_cls.weight"] = (num_classes, cin)
    shapes["cls_head.fc_cls.bias"] = (num_classes,)
    return shapes


def _trunk(name: str) -> ResNet:
    with torch.device("meta"):
        return cast(ResNet, build_model(ModelConfig(name=name)).get_submodule("trunk"))


def _stage_summary(trunk: ResNet) -> tuple[tuple[int, int, int], ...]:
    """Per stage: (3x1x1 first convs, 1x1x1 first convs, non-local blocks)."""
    rows = []
    for stage in trunk.stages():
        blocks = list(cast(Iterable[Bottleneck], stage))
        kernels = [cast(nn.Conv3d, b.conv1).kernel_size for b in blocks]
        assert set(kernels) <= {(3, 1, 1), (1, 1, 1)}
        inflated = kernels.count((3, 1, 1))
        rows.append(
            (inflated, len(blocks) - inflated, sum(b.non_local is not None for b in blocks))
        )
    return tuple(rows)


@pytest.mark.parametrize("name", [*REFERENCE_MODELS, *TABLE1_PARAMS])
def test_parameter_counts(name: str) -> None:
    """The reference models have MMAction2's counts; the TSM paper's Table 1 I3D (and its
    I3D-NL) keep theirs."""
    expected = PARAMS.get(name) or TABLE1_PARAMS[name]
    assert sum(p.numel() for p in _trunk(name).parameters()) == expected


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_macs_per_32x224_clip(name: str) -> None:
    info = model_info(ModelConfig(name=name), frames=32, size=224)
    assert (info.params, info.macs) == (PARAMS[name], MACS_224[name])
    assert list(info.stage_frames.values()) == [32, 16, 8, 8, 4, 4, 4, 4, 1]
    assert default_frames(name) == 32


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_stages_in_compact_form(name: str) -> None:
    trunk = _trunk(name)
    placement = MMACTION2_NON_LOCAL if name in REFERENCE_NL else NO_NON_LOCAL
    expected = tuple(
        (sum(inflate), len(inflate) - sum(inflate), sum(nl))
        for inflate, nl in zip(MMACTION2_INFLATE, placement, strict=True)
    )
    assert _stage_summary(trunk) == expected
    if name in REFERENCE_NL:
        assert expected == REFERENCE_STAGES and I3D_NL_PLACEMENT == MMACTION2_NON_LOCAL
    inflate = tuple(
        tuple(int(I3D_REFERENCE.block_kernel(s, i) == 3) for i in range(len(flags)))
        for s, flags in enumerate(MMACTION2_INFLATE)
    )
    assert inflate == MMACTION2_INFLATE


@pytest.mark.parametrize("name", REFERENCE_MODELS)
@pytest.mark.parametrize("num_classes", [400, 7])
def test_every_tensor_has_an_mmaction2_twin(name: str, num_classes: int) -> None:
    """Renamed keys give MMAction2's state_dict exactly: same keys, same shapes, buffers too."""
    with torch.device("meta"):
        state = build_model(ModelConfig(name=name, num_classes=num_classes)).state_dict()
    ours = {vidscale_to_mmaction2(k, model=name): tuple(v.shape) for k, v in state.items()}
    assert len(ours) == len(state)  # the renaming is one to one
    placement = MMACTION2_NON_LOCAL if name in REFERENCE_NL else NO_NON_LOCAL
    assert ours == mmaction2_shapes(num_classes=num_classes, non_local=placement)
    assert ours["cls_head.fc_cls.weight"] == (num_classes, 2048)
    assert ours["cls_head.fc_cls.bias"] == (num_classes,)


def test_modules_match_mmaction2s_settings() -> None:
    """BN eps and momentum, the stem's temporal strides and pools, bias-free convs except the
    non-local block's θ, φ, g, and the head: pool, dropout, then fc."""
    model = build_model(ModelConfig(name="i3d_nl_resnet50_ref", num_classes=400))
    trunk = cast(ResNet, model.get_submodule("trunk"))
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm3d)]
    assert bns and all((m.eps, m.momentum) == (1e-5, 0.1) for m in bns)
    conv1 = cast(nn.Conv3d, trunk.conv1)
    assert (conv1.kernel_size, conv1.stride, conv1.padding) == ((5, 7, 7), (2, 2, 2), (2, 3, 3))
    pool1 = cast(nn.MaxPool3d, trunk.maxpool)
    assert (pool1.kernel_size, pool1.stride, pool1.padding) == ((1, 3, 3), (2, 2, 2), (0, 1, 1))
    assert trunk.temporal.pool2 == (2, 2)
    biased = {
        name.rsplit(".", 1)[-1]
        for name, m in model.named_modules()
        if isinstance(m, nn.Conv3d) and m.bias is not None
    }
    assert biased == {"theta", "phi", "g"}
    dropout = cast(nn.Dropout, model.get_submodule("dropout"))
    assert dropout.p == 0.5 and trunk.fc.bias is not None


def test_initialisation_follows_mmaction2() -> None:
    """Non-local blocks start as identities (BN γ = β = 0 after `conv_out`), the fc at N(0, 0.01)
    with zero bias (`I3DHead(init_std=0.01)`), no zero-initialised residual BN."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="i3d_nl_resnet50_ref", num_classes=400))
    trunk = cast(ResNet, model.get_submodule("trunk"))
    blocks = [m for m in model.modules() if isinstance(m, NonLocalBlock)]
    assert len(blocks) == 5
    assert all(not b.out_bn.weight.any() and not b.out_bn.bias.any() for b in blocks)
    assert trunk.fc.weight.std().item() == pytest.approx(0.01, rel=0.02)
    assert not trunk.fc.bias.any()
    bn3s = [cast(nn.BatchNorm3d, cast(Bottleneck, b).bn3) for b in trunk.blocks()]
    assert all(bn.weight.eq(1).all() for bn in bn3s)


def test_an_i3d_ref_run_loads_into_the_nl_ref_key_for_key() -> None:
    """The two reference models share every trunk tensor: I3D-NL adds only the blocks."""
    with torch.device("meta"):
        i3d = build_model(ModelConfig(name=REFERENCE_I3D)).state_dict()
        nl = build_model(ModelConfig(name=REFERENCE_NL[0])).state_dict()
    new = {k for k in nl if ".non_local." in k}
    assert set(nl) - new == set(i3d) and len(new) == 5 * 12
    assert all(nl[k].shape == v.shape for k, v in i3d.items())
