"""Sub-batch BatchNorm (Wu et al. 2020 §3.3; PySlowFast SubBatchNorm3d): splits of clips,
aggregated statistics, switching modes in place, checkpoints and exact resume."""

from __future__ import annotations

import copy
from typing import TypeVar, cast

import pytest
import torch
from torch import Tensor, nn

from vidscale.models.batchnorm import (
    SubBatchNorm2d,
    SubBatchNorm3d,
    aggregate_split_stats,
    load_split_state,
    set_batch_clips,
    set_batchnorm_splits,
    split_state,
)
from vidscale.models.registry import ModelConfig, build_model

F64 = torch.float64
BatchNormT = TypeVar("BatchNormT", nn.BatchNorm2d, nn.BatchNorm3d)
ModuleT = TypeVar("ModuleT", bound=nn.Module)


def _bn(kind: type[BatchNormT], channels: int = 3) -> BatchNormT:
    """A float64 BN with a non-trivial affine and running statistics."""
    bn = kind(channels).to(F64)
    assert bn.running_mean is not None and bn.running_var is not None
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-1.0, 1.0)
        bn.running_mean.uniform_(-1.0, 1.0)
        bn.running_var.uniform_(0.5, 2.0)
    return bn


def _model(name: str, *, temporal_pool: bool = False) -> nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(name=name, num_classes=5, dropout=0.0, temporal_pool=temporal_pool)
    return build_model(cfg).to(F64).train()


def _batchnorms(model: nn.Module) -> dict[str, nn.BatchNorm2d | nn.BatchNorm3d]:
    return {
        n: m for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d | nn.BatchNorm3d)
    }


# -- the aggregation formula ------------------------------------------------------------------


def test_aggregate_worked_by_hand() -> None:
    # Channel 0 is the DESIGN vector: BN merge (0, 1) + (2, 1) -> mean 1, var 2.
    # Channel 1: means (1, 3), vars (2, 4) -> mean 2, var 3 + ((-1)² + 1²) / 2 = 4.
    means = torch.tensor([[0.0, 1.0], [2.0, 3.0]], dtype=F64)  # (k, C)
    vars_ = torch.tensor([[1.0, 2.0], [1.0, 4.0]], dtype=F64)
    mean, var = aggregate_split_stats(means, vars_)
    assert mean.tolist() == [1.0, 2.0]
    assert var.tolist() == [2.0, 4.0]
    # Three splits: means (0, 3, 6), vars (1, 1, 1) -> mean 3, var 1 + (9 + 0 + 9) / 3 = 7.
    mean, var = aggregate_split_stats(
        torch.tensor([[0.0], [3.0], [6.0]], dtype=F64), torch.ones(3, 1, dtype=F64)
    )
    assert (mean.item(), var.item()) == (3.0, 7.0)


def test_module_running_stats_hold_the_aggregate() -> None:
    bn = SubBatchNorm3d(2, splits=2, dtype=F64)
    bn.split_mean.copy_(torch.tensor([0.0, 1.0, 2.0, 3.0]))  # split j channel c at j·C + c
    bn.split_var.copy_(torch.tensor([1.0, 2.0, 1.0, 4.0]))
    bn.aggregate()
    assert bn.running_mean is not None and bn.running_var is not None
    assert bn.running_mean.tolist() == [1.0, 2.0]
    assert bn.running_var.tolist() == [2.0, 4.0]
    bn(torch.randn(4, 2, 2, 3, 3, dtype=F64))  # a training forward keeps them aggregated
    k = bn.split_mean.view(2, 2), bn.split_var.view(2, 2)
    mean, var = aggregate_split_stats(*k)
    assert torch.equal(bn.running_mean, mean) and torch.equal(bn.running_var, var)


# -- training: each split of interleaved clips is a plain BN ----------------------------------


def _split_reference(bn: ModuleT, splits: int) -> list[ModuleT]:
    return [copy.deepcopy(bn) for _ in range(splits)]


@pytest.mark.parametrize("channels_last", [False, True])
def test_volume_sub_bn_is_plain_bn_per_interleaved_split(channels_last: bool) -> None:
    torch.manual_seed(0)
    k = 2
    bn = _bn(nn.BatchNorm3d)
    refs = _split_reference(bn, k)
    model = nn.Sequential(bn)
    assert set_batchnorm_splits(model, k) == 1
    sub = model[0]
    assert isinstance(sub, SubBatchNorm3d) and sub.weight is bn.weight
    for step in range(2):  # the second step checks the momentum update of each split's stats
        x = torch.randn(6, 3, 2, 4, 4, dtype=F64)  # N = 6 clips: splits {0, 2, 4}, {1, 3, 5}
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last_3d)
        x.requires_grad_(True)
        out = sub(x)
        if channels_last:
            assert out.is_contiguous(memory_format=torch.channels_last_3d)
        expected = [ref(x[j::k]) for j, ref in enumerate(refs)]
        for j in range(k):
            torch.testing.assert_close(out[j::k], expected[j], rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(sub.split_mean.view(k, 3)[j], refs[j].running_mean)
            torch.testing.assert_close(sub.split_var.view(k, 3)[j], refs[j].running_var)
        assert sub.num_batches_tracked is not None
        assert int(sub.num_batches_tracked) == step + 1
    # The shared affine gets the sum of the splits' gradients.
    g = torch.randn_like(out)
    (out * g).sum().backward()
    for ref in refs:
        ref.weight.grad = None
    sum(
        ((e * g[j::k]).sum() for j, e in enumerate(expected)), torch.zeros((), dtype=F64)
    ).backward()
    torch.testing.assert_close(sub.weight.grad, _grad(refs[0].weight) + _grad(refs[1].weight))
    torch.testing.assert_close(sub.bias.grad, _grad(refs[0].bias) + _grad(refs[1].bias))


def _grad(p: Tensor) -> Tensor:
    assert p.grad is not None
    return p.grad


@pytest.mark.parametrize("channels_last", [False, True])
def test_frames_sub_bn_splits_clips_not_frames(channels_last: bool) -> None:
    torch.manual_seed(0)
    n, t, c, k = 4, 3, 3, 2
    bn = _bn(nn.BatchNorm2d, c)
    refs = _split_reference(bn, k)
    sub = SubBatchNorm2d(c, splits=k, dtype=F64)
    sub.load_state_dict(bn.state_dict())
    set_batch_clips(sub, n)
    x = torch.randn(n * t, c, 4, 4, dtype=F64)  # row n·T + t
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    out = sub(x)
    if channels_last:
        assert out.is_contiguous(memory_format=torch.channels_last)
    clips_out = out.view(n, t, c, 4, 4)
    clips_in = x.reshape(n, t, c, 4, 4)
    for j, ref in enumerate(refs):
        expected = ref(clips_in[j::k].reshape(-1, c, 4, 4)).view(-1, t, c, 4, 4)
        torch.testing.assert_close(clips_out[j::k], expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(sub.split_mean.view(k, c)[j], ref.running_mean)
        torch.testing.assert_close(sub.split_var.view(k, c)[j], ref.running_var)


def test_bf16_autocast_matches_plain_bn_per_split() -> None:
    torch.manual_seed(0)
    k = 2
    bn = nn.BatchNorm2d(4)
    refs = _split_reference(bn, k)
    sub = SubBatchNorm2d(4, splits=k)
    x = torch.randn(4 * 2, 4, 5, 5).contiguous(memory_format=torch.channels_last)
    set_batch_clips(sub, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sub(x.to(torch.bfloat16))
        clips = x.to(torch.bfloat16).view(4, 2, 4, 5, 5)
        expected = [ref(clips[j::k].reshape(-1, 4, 5, 5)) for j, ref in enumerate(refs)]
    assert out.dtype == expected[0].dtype
    for j in range(k):
        torch.testing.assert_close(out.view(4, 2, 4, 5, 5)[j::k].reshape(-1, 4, 5, 5), expected[j])
        torch.testing.assert_close(sub.split_mean.view(k, 4)[j], refs[j].running_mean)


@pytest.mark.parametrize(
    ("name", "size", "pool"),
    [("tsm_resnet18", 32, False), ("tsn_resnet18", 32, True), ("i3d_resnet50_3x3x3", 16, False)],
)
def test_model_sub_bn_is_the_plain_model_per_split(name: str, size: int, pool: bool) -> None:
    """T reaches the 2D BNs through the trunk (also after TSN's temporal pool halves it)."""
    model = _model(name, temporal_pool=pool)
    refs = [copy.deepcopy(model) for _ in range(2)]
    assert set_batchnorm_splits(model, 2) == len(_batchnorms(model))
    clips = torch.randn(4, 3, 8, size, size, dtype=F64)  # N = 4 clips of 8 frames
    out = model(clips)
    subs = _batchnorms(model)
    for j, ref in enumerate(refs):
        torch.testing.assert_close(out[j::2], ref(clips[j::2]), rtol=1e-10, atol=1e-10)
        for bn_name, bn in _batchnorms(ref).items():
            sub = cast(SubBatchNorm2d | SubBatchNorm3d, subs[bn_name])
            c = sub.num_features
            torch.testing.assert_close(sub.split_mean.view(2, c)[j], bn.running_mean)
            torch.testing.assert_close(sub.split_var.view(2, c)[j], bn.running_var)


def test_clips_not_divisible_by_splits() -> None:
    sub = SubBatchNorm3d(3, splits=4)
    with pytest.raises(ValueError, match=r"\(6\).*\(4\)"):
        sub(torch.randn(6, 3, 1, 2, 2))
    model = _model("tsm_resnet18")
    set_batchnorm_splits(model, 2)
    with pytest.raises(ValueError, match=r"\(3\).*\(2\)"):
        model(torch.randn(3, 3, 2, 32, 32, dtype=F64))


# -- switching modes in place -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "tsm_resnet18",
        "tsm_resnet50",
        "tsn_resnet18",
        "tsn_resnet50",
        "i3d_resnet50_3x3x3",
        "i3d_resnet50_3x1x1",
    ],
)
def test_every_registered_trunk_converts(name: str) -> None:
    with torch.device("meta"):
        model = build_model(ModelConfig(name=name, num_classes=5))
    count = len(_batchnorms(model))
    kind = SubBatchNorm3d if name.startswith("i3d") else SubBatchNorm2d
    assert set_batchnorm_splits(model, 4) == count > 0
    assert all(type(m) is kind and m.splits == 4 for m in _batchnorms(model).values())
    assert set_batchnorm_splits(model, 1) == count
    assert all(type(m) in (nn.BatchNorm2d, nn.BatchNorm3d) for m in _batchnorms(model).values())


def test_generic_model_and_idempotent_switch() -> None:
    """Any nn.BatchNorm2d/3d model; a 2D BN without clips treats each row as one sample."""
    torch.manual_seed(0)
    shared = nn.BatchNorm2d(4)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), shared, nn.ReLU(), nn.Sequential(shared))
    assert set_batchnorm_splits(model, 2) == 1  # one module under two names: converted once
    assert model[1] is cast(nn.Sequential, model[3])[0]
    model(torch.randn(6, 3, 5, 5))
    stats = split_state(model)
    assert set_batchnorm_splits(model, 2) == 0  # already there: split statistics kept
    assert torch.equal(split_state(model)["1"], stats["1"])
    with pytest.raises(ValueError, match="splits must be >= 1"):
        set_batchnorm_splits(model, 0)


def test_running_stats_do_not_drift_through_conversions() -> None:
    bn = _bn(nn.BatchNorm3d)
    model = nn.Sequential(bn)
    assert bn.running_mean is not None and bn.running_var is not None
    mean, var = bn.running_mean.clone(), bn.running_var.clone()
    set_batchnorm_splits(model, 4)
    torch.testing.assert_close(split_state(model)["0"][0], mean.expand(4, 3))
    set_batchnorm_splits(model, 2)
    set_batchnorm_splits(model, 1)
    torch.testing.assert_close(model[0].running_mean, mean)
    torch.testing.assert_close(model[0].running_var, var)


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, clips: Tensor) -> Tensor:
    opt.zero_grad()
    out = model(clips)
    out.square().mean().backward()
    opt.step()
    return out.detach()


def test_eval_after_switching_back_equals_sub_bn_eval() -> None:
    model = _model("tsm_resnet18")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    set_batchnorm_splits(model, 2)
    for seed in range(2):
        torch.manual_seed(seed)
        _train_step(model, opt, torch.randn(4, 3, 8, 32, 32, dtype=F64))
    clips = torch.randn(2, 3, 8, 32, 32, dtype=F64)
    with torch.no_grad():
        sub_eval = model.eval()(clips)
        set_batchnorm_splits(model, 1)
        assert torch.equal(model(clips), sub_eval)
        set_batchnorm_splits(model, 4)  # new splits start from the aggregate: same evaluation
        torch.testing.assert_close(model(clips), sub_eval)


def test_optimizer_keeps_updating_the_same_parameters() -> None:
    model = _model("tsm_resnet18")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [id(p) for p in model.parameters()]
    for splits in (2, 1):
        set_batchnorm_splits(model, splits)
        assert [id(p) for p in model.parameters()] == before
        bn = cast(nn.BatchNorm2d, model.get_submodule("trunk.layer1.0.bn1"))
        assert any(p is bn.weight for p in opt.param_groups[0]["params"])
        old = bn.weight.detach().clone()
        _train_step(model, opt, torch.randn(4, 3, 8, 32, 32, dtype=F64))
        assert bn.weight.grad is not None and not torch.equal(bn.weight, old)


# -- checkpoints ------------------------------------------------------------------------------


def test_state_dict_is_plain_and_loads_strictly_into_a_plain_model() -> None:
    model = _model("tsm_resnet18")
    plain_keys = list(model.state_dict())
    set_batchnorm_splits(model, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.randn(4, 3, 8, 32, 32, dtype=F64))
    state = model.state_dict()
    assert list(state) == plain_keys
    bn = cast(SubBatchNorm2d, model.get_submodule("trunk.bn1"))
    mean, var = aggregate_split_stats(bn.split_mean.view(2, -1), bn.split_var.view(2, -1))
    assert torch.equal(state["trunk.bn1.running_mean"], mean)
    assert torch.equal(state["trunk.bn1.running_var"], var)
    plain = _model("tsm_resnet18")
    plain.load_state_dict(state, strict=True)
    clips = torch.randn(2, 3, 8, 32, 32, dtype=F64)
    with torch.no_grad():
        assert torch.equal(plain.eval()(clips), model.eval()(clips))


@pytest.mark.slow
def test_exact_resume_with_split_state() -> None:
    model = _model("tsm_resnet18")
    set_batchnorm_splits(model, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for seed in range(2):
        torch.manual_seed(seed)
        _train_step(model, opt, torch.randn(4, 3, 8, 32, 32, dtype=F64))
    checkpoint = copy.deepcopy(
        {"model": model.state_dict(), "opt": opt.state_dict(), "splits": split_state(model)}
    )

    resumed = _model("tsm_resnet18")
    set_batchnorm_splits(resumed, 2)
    resumed_opt = torch.optim.SGD(resumed.parameters(), lr=0.1, momentum=0.9)
    resumed.load_state_dict(checkpoint["model"])
    approx = split_state(resumed)  # load_state_dict alone: every split at the aggregate
    assert torch.equal(approx["trunk.bn1"][0, 0], approx["trunk.bn1"][0, 1])
    resumed_opt.load_state_dict(checkpoint["opt"])
    load_split_state(resumed, checkpoint["splits"])
    assert split_state(resumed).keys() == checkpoint["splits"].keys()
    for name, saved in checkpoint["splits"].items():
        assert torch.equal(split_state(resumed)[name], saved)

    clips = torch.randn(4, 3, 8, 32, 32, dtype=F64)
    assert torch.equal(_train_step(resumed, resumed_opt, clips), _train_step(model, opt, clips))
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    for name, saved in split_state(model).items():
        assert torch.equal(split_state(resumed)[name], saved), name


def test_load_split_state_must_fit() -> None:
    model = nn.Sequential(nn.BatchNorm3d(3))
    set_batchnorm_splits(model, 2)
    with pytest.raises(ValueError, match=r"missing \['0'\]"):
        load_split_state(model, {})
    with pytest.raises(ValueError, match="shape"):
        load_split_state(model, {"0": torch.zeros(2, 4, 3)})
    with pytest.raises(ValueError, match=r"unexpected \['1'\]"):
        load_split_state(model, {**split_state(model), "1": torch.zeros(2, 2, 3)})
    assert split_state(nn.Sequential(nn.BatchNorm3d(3))) == {}
