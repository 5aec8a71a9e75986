"""Non-local blocks (Wang et al. 2018) and the I3D-NL models built on them."""

from pathlib import Path

import pytest
import torch
from torch import nn

from tests.models.test_transfer import randomised
from vidscale.bench.compute.flops import model_info
from vidscale.config import save_config
from vidscale.models.i3d import I3D_3X1X1, I3D_NL_PLACEMENT, I3D_REFERENCE, i3d_non_local
from vidscale.models.nonlocal_block import (
    NON_LOCAL_MODES,
    NonLocalBlock,
    NonLocalMode,
    NonLocalSpec,
)
from vidscale.models.pretrained import load_pretrained
from vidscale.models.registry import ModelConfig, build_model
from vidscale.models.resnet import ResNet
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import save_checkpoint
from vidscale.train.init_from import describe, initialise_from

NL_MODELS = ("i3d_nl_resnet50_3x1x1", "i3d_nl_embedded_gaussian_resnet50_3x1x1")
# MMAction2's I3D R50 and I3D-NL dot-product R50 32x2x1 (configs/recognition/i3d/metafile.yml):
# their res5 inflates the middle block (the non-local reference code's basis), ours the outer two.
MMACTION2_I3D_PARAMS, MMACTION2_I3D_NL_PARAMS = 28_043_472, 35_397_840
MMACTION2_I3D_NL_GFLOPS = 59.3  # fvcore-style: one "FLOP" per multiply-accumulate
# Registered as `i3d_resnet50_ref` (its own tests: tests/models/test_i3d_reference.py).
REFERENCE_I3D = I3D_REFERENCE


def perturbed(block: NonLocalBlock) -> NonLocalBlock:
    """The block after γ has moved off 0: no longer the identity."""
    with torch.no_grad():
        block.out_bn.weight.fill_(0.5)
    return block


@pytest.mark.parametrize("mode", NON_LOCAL_MODES)
@pytest.mark.parametrize("training", [True, False])
def test_a_new_block_is_the_identity(mode: NonLocalMode, training: bool) -> None:
    torch.manual_seed(0)
    block = NonLocalBlock(16, mode=mode).train(training)
    x = torch.randn(2, 16, 3, 6, 5)
    assert torch.allclose(block(x), x, atol=1e-6, rtol=0)
    # Not because the branch is silent: with γ moved the output moves (a little: the branch's
    # N(0, 0.01) kernels make y tiny beside BN's eps and initial running variance).
    assert (perturbed(block)(x) - x).abs().max() > 1e-5


@pytest.mark.parametrize("mode", NON_LOCAL_MODES)
def test_a_gradient_reaches_every_parameter(mode: NonLocalMode) -> None:
    torch.manual_seed(0)
    block = NonLocalBlock(8, mode=mode)
    x = torch.randn(2, 8, 2, 4, 4)
    # At γ = 0 only BN's affine parameters learn: the rest is behind the zero scale.
    block(x).pow(2).sum().backward()
    silent = {n for n, p in block.named_parameters() if p.grad is None or not p.grad.any()}
    assert silent == {"theta.weight", "theta.bias", "phi.weight", "phi.bias", "g.weight",
                      "g.bias", "out.weight"}  # fmt: skip
    # One SGD step moves γ, after which every parameter has a gradient.
    torch.optim.SGD(block.parameters(), lr=0.1).step()
    block.zero_grad()
    block(x).pow(2).sum().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_embedded_gaussian_rows_sum_to_one() -> None:
    torch.manual_seed(0)
    block = NonLocalBlock(8, mode="embedded_gaussian")
    weights = block.affinity(torch.randn(2, 8, 2, 6, 4))
    assert weights.shape == (2, 2 * 6 * 4, 2 * 3 * 2)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 48), atol=1e-6)
    assert (weights > 0).all()


def test_dot_product_is_divided_by_the_number_of_positions() -> None:
    torch.manual_seed(0)
    block = NonLocalBlock(8, mode="dot_product")
    x = torch.randn(1, 8, 2, 4, 4)
    theta = block.theta(x).flatten(2)  # (1, 4, 32)
    phi = nn.functional.max_pool3d(block.phi(x), (1, 2, 2)).flatten(2)  # (1, 4, 8)
    expected = theta.transpose(1, 2) @ phi / 8
    assert torch.allclose(block.affinity(x), expected, atol=1e-7)


@pytest.mark.parametrize(
    ("thw", "positions"),
    [((4, 8, 6), 4 * 4 * 3), ((2, 7, 5), 2 * 4 * 3), ((3, 1, 1), 3)],  # odd sizes round up
)
def test_phi_and_g_are_sub_sampled_1x2x2(thw: tuple[int, int, int], positions: int) -> None:
    x = torch.randn(1, 6, *thw)
    block = NonLocalBlock(6)
    t, h, w = thw
    assert block.affinity(x).shape == (1, t * h * w, positions)
    assert perturbed(block)(x).shape == x.shape
    full = NonLocalBlock(6, sub_sample=False)
    assert full.affinity(x).shape == (1, t * h * w, t * h * w)


def test_inner_width_is_half_and_parameters_are_mmaction2s() -> None:
    block = NonLocalBlock(1024)
    assert block.theta.out_channels == block.phi.out_channels == block.g.out_channels == 512
    assert block.out.bias is None
    assert sum(p.numel() for p in block.parameters()) == 2_100_736  # MMAction2's NonLocal3d


def test_bad_specs_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="mode"):
        NonLocalBlock(8, mode="gaussian")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="4 stages"):
        NonLocalSpec(after=((0,), (1,)))
    with pytest.raises(ValueError, match="0 or 1"):
        NonLocalSpec(after=((0,), (2,), (0,), (0,)))
    with pytest.raises(ValueError, match="flags per stage"):
        ResNet(18, temporal=I3D_3X1X1, non_local=i3d_non_local("dot_product"))
    with pytest.raises(ValueError, match="'volume' layout"):
        ResNet(50, non_local=i3d_non_local("dot_product"))


@pytest.mark.parametrize("name", NL_MODELS)
def test_the_blocks_sit_after_res3_1_3_and_res4_1_3_5(name: str) -> None:
    with torch.device("meta"):
        trunk = build_model(ModelConfig(name=name)).get_submodule("trunk")
    assert isinstance(trunk, ResNet)
    where = tuple(
        tuple(int(getattr(block, "non_local", None) is not None) for block in stage)
        for stage in trunk.stages()
    )
    assert where == I3D_NL_PLACEMENT == ((0, 0, 0), (0, 1, 0, 1), (0, 1, 0, 1, 0, 1), (0, 0, 0))
    modes = {m.mode for m in trunk.modules() if isinstance(m, NonLocalBlock)}
    assert modes == {"embedded_gaussian" if "gaussian" in name else "dot_product"}


def test_an_i3d_run_initialises_only_the_new_blocks(tmp_path: Path) -> None:
    """`model.init_from=RUN` of an I3D run: every trunk tensor is the run's, only the non-local
    tensors are new, and the I3D-NL computes the I3D's logits (its blocks are identities)."""
    i3d = randomised(build_model(ModelConfig(name="i3d_resnet50_3x1x1", num_classes=5)))
    run = tmp_path / "i3d"
    (run / "checkpoints").mkdir(parents=True)
    save_config(get_recipe("i3d_r50_k400_32f_multigrid_b64_e100"), run / "config.json")
    save_checkpoint({"model": i3d.state_dict()}, run / "checkpoints" / "last.pt")
    nl = build_model(ModelConfig(name="i3d_nl_resnet50_3x1x1", num_classes=5)).eval()
    fresh = {k: v.clone() for k, v in nl.state_dict().items() if ".non_local." in k}
    report = initialise_from(nl, run)
    loaded, trained = nl.state_dict(), i3d.state_dict()
    assert set(report.new) == set(fresh) and len(fresh) == 5 * 12  # 7 parameters, 5 BN buffers
    assert set(report.copied) == set(trained) and set(loaded) == set(trained) | set(fresh)
    assert all(torch.equal(loaded[k], v) for k, v in trained.items())
    assert all(torch.equal(loaded[k], v) for k, v in fresh.items())
    assert "60 non-local tensors new" in describe(report)
    clip = torch.randn(1, 3, 8, 32, 32)
    with torch.no_grad():
        assert torch.allclose(nl(clip), i3d(clip), atol=1e-6, rtol=0)


def test_counts_against_mmaction2s_zoo() -> None:
    """Parameters: MMAction2's I3D-NL R50 exactly, on its I3D basis; ours differs by exactly the
    I3D bases' difference. MACs: 59.1 G at 32x256² (conv + attention products; the zoo's 59.3
    G also counts BN and pooling), and the same for both bases."""
    nl = i3d_non_local("dot_product")
    with torch.device("meta"):
        reference = ResNet(50, num_classes=400, temporal=REFERENCE_I3D, non_local=nl)
        reference_i3d = ResNet(50, num_classes=400, temporal=REFERENCE_I3D)
    params = sum(p.numel() for p in reference.parameters())
    assert sum(p.numel() for p in reference_i3d.parameters()) == MMACTION2_I3D_PARAMS
    assert params == MMACTION2_I3D_NL_PARAMS
    ours = model_info(ModelConfig(name="i3d_nl_resnet50_3x1x1"), frames=32, size=256)
    i3d = model_info(ModelConfig(name="i3d_resnet50_3x1x1"), frames=32, size=256)
    assert ours.params - params == i3d.params - MMACTION2_I3D_PARAMS == 1_015_808
    assert ours.macs / 1e9 == pytest.approx(MMACTION2_I3D_NL_GFLOPS, rel=0.005)
    at_224 = model_info(ModelConfig(name="i3d_nl_resnet50_3x1x1"), frames=32, size=224)
    assert at_224.macs / 1e9 == pytest.approx(44.34, abs=0.005)


@pytest.mark.parametrize("name", NL_MODELS)
def test_tiny_forward_and_backward(name: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model(ModelConfig(name=name, num_classes=3))
    for block in model.modules():
        if isinstance(block, NonLocalBlock):
            perturbed(block)
    logits = model(torch.randn(2, 3, 8, 48, 48))
    assert logits.shape == (2, 3)
    logits.logsumexp(dim=1).sum().backward()
    for pname, p in model.named_parameters():
        if ".non_local." in pname:
            assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_imagenet_weights_leave_the_blocks_as_identities(tmp_path: Path) -> None:
    """`model.pretrained` (a torchvision ResNet-50 file) inflates into the trunk; the image
    network has no non-local blocks, so they keep their initialisation."""
    imagenet = randomised(ResNet(50)).state_dict()
    path = tmp_path / "resnet50.pth"
    torch.save(imagenet, path)
    trunk = ResNet(50, temporal=I3D_3X1X1, non_local=i3d_non_local("dot_product"))
    fresh = {k: v.clone() for k, v in trunk.state_dict().items() if ".non_local." in k}
    assert load_pretrained(trunk, path=path) == list(fresh)
    loaded = trunk.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in fresh.items())
    assert torch.equal(loaded["layer4.2.bn3.weight"], imagenet["layer4.2.bn3.weight"])
    assert torch.equal(loaded["layer2.1.conv2.weight"][:, :, 0], imagenet["layer2.1.conv2.weight"])
