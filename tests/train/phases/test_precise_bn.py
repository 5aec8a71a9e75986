"""Precise BN (fvcore `update_bn_stats` semantics through torch's `update_bn`): population
statistics worked by hand, what is put back afterwards, and sub-batch BN."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vidscale.models.batchnorm import aggregate_split_stats, set_batchnorm_splits, split_state
from vidscale.train.phases.precise_bn import precise_bn

F64 = torch.float64


def _model() -> nn.Sequential:
    """conv -> BN -> ReLU -> conv -> BN, float64, with a non-trivial affine."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)
    ).to(F64)
    with torch.no_grad():
        for bn in _bns(model):
            assert bn.running_mean is not None and bn.running_var is not None
            assert bn.num_batches_tracked is not None
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-1.0, 1.0)
            bn.running_mean.fill_(5.0)  # stale statistics that precise BN must replace
            bn.running_var.fill_(9.0)
            bn.num_batches_tracked.fill_(7)
    _bns(model)[1].momentum = None
    return model


def _bns(model: nn.Sequential) -> tuple[nn.BatchNorm2d, nn.BatchNorm2d]:
    """`_model`'s two BNs (model[1], model[4])."""
    return cast(nn.BatchNorm2d, model[1]), cast(nn.BatchNorm2d, model[4])


def _batches(count: int) -> list[Tensor]:
    torch.manual_seed(1)
    return [torch.randn(4, 2, 6, 6, dtype=F64) * (b + 1) + b for b in range(count)]


def _stats(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-channel batch mean and unbiased variance (what BN folds into running_var)."""
    dims = [0, *range(2, x.dim())]
    return x.mean(dims), x.var(dims, correction=1)


def _expected(model: nn.Sequential, batches: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    """Population mean of the batch means and of the batch variances, for both BNs."""
    per_bn: list[list[tuple[Tensor, Tensor]]] = [[], []]
    with torch.no_grad():
        for x in batches:
            f1 = model[0](x)
            per_bn[0].append(_stats(f1))
            bn1 = _bns(model)[0]
            h = F.relu(F.batch_norm(f1, None, None, bn1.weight, bn1.bias, True, 0.0, bn1.eps))
            per_bn[1].append(_stats(model[3](h)))
    return [
        (torch.stack([m for m, _ in s]).mean(0), torch.stack([v for _, v in s]).mean(0))
        for s in per_bn
    ]


def test_precise_bn_is_the_population_average_of_batch_statistics() -> None:
    model = _model()
    batches = _batches(3)
    expected = _expected(model, batches)
    weights = [p.detach().clone() for p in model.parameters()]
    model.eval()
    model[2].train()  # a mixed state: every module's own flag comes back
    precise_bn(model, iter(batches), num_batches=3)
    for bn, (mean, var) in zip(_bns(model), expected, strict=True):
        torch.testing.assert_close(bn.running_mean, mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(bn.running_var, var, rtol=1e-12, atol=1e-12)
        assert bn.num_batches_tracked is not None
        assert int(bn.num_batches_tracked) == 7  # a statistic refresh, not training steps
    assert (model[1].momentum, model[4].momentum) == (0.1, None)
    assert [m.training for m in model] == [False, False, True, False, False]
    for before, after in zip(weights, model.parameters(), strict=True):
        assert torch.equal(before, after) and after.grad is None


def test_only_num_batches_are_used_and_forward_is_the_callers() -> None:
    model = _model()
    batches = _batches(4)
    expected = _expected(model, batches[:2])
    labelled = ((x, torch.zeros(4)) for x in batches)  # a generator of (clips, labels)
    seen: list[int] = []

    def forward(m: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
        seen.append(len(batch))
        return m(batch[0])

    precise_bn(model, labelled, num_batches=2, forward=forward)  # type: ignore[arg-type]
    assert seen == [2, 2]  # the tuple arrived whole
    assert next(labelled)[0] is batches[2]  # nothing read beyond num_batches
    torch.testing.assert_close(model[1].running_mean, expected[0][0])
    torch.testing.assert_close(model[4].running_var, expected[1][1])


def test_too_few_batches_raise_and_change_nothing() -> None:
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="needs 5 batches, the iterable gave 3"):
        precise_bn(model, _batches(3), num_batches=5)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert model[4].momentum is None and model.training
    with pytest.raises(ValueError, match="num_batches must be >= 1"):
        precise_bn(model, _batches(1), num_batches=0)


def test_a_failing_forward_puts_everything_back() -> None:
    model = _model().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def forward(m: nn.Module, batch: Tensor) -> Tensor:
        m(batch)
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        precise_bn(model, _batches(2), num_batches=2, forward=forward)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert (model[1].momentum, model[4].momentum) == (0.1, None) and not model.training


def test_sub_batch_bn_gets_precise_splits_and_their_aggregate() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv3d(2, 3, 1), nn.BatchNorm3d(3)).to(F64)
    set_batchnorm_splits(model, 2)
    torch.manual_seed(1)
    batches = [torch.randn(4, 2, 2, 3, 3, dtype=F64) + b for b in range(3)]
    precise_bn(model, batches, num_batches=3)
    with torch.no_grad():
        # Split j holds clips j, j + 2 of every batch; its precise statistics as above.
        per_split = [[_stats(model[0](x[j::2])) for x in batches] for j in range(2)]
    means = torch.stack([torch.stack([m for m, _ in s]).mean(0) for s in per_split])
    vars_ = torch.stack([torch.stack([v for _, v in s]).mean(0) for s in per_split])
    state = split_state(model)["1"]
    torch.testing.assert_close(state[0], means, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state[1], vars_, rtol=1e-12, atol=1e-12)
    mean, var = aggregate_split_stats(means, vars_)
    torch.testing.assert_close(model[1].running_mean, mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model[1].running_var, var, rtol=1e-12, atol=1e-12)


def test_a_model_without_batchnorm_is_left_alone_and_its_batches_are_not_read() -> None:
    """Nothing to recompute: no batch is drawn, no forward runs, weights and mode unchanged,
    and so an iterable shorter than `num_batches` is no error (it is one with a BN)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    drawn: list[Tensor] = []

    def batches() -> Iterator[Tensor]:
        for _ in range(3):
            drawn.append(torch.randn(4, 2))
            yield drawn[-1]

    def forward(m: nn.Module, batch: Tensor) -> Tensor:
        raise AssertionError("forward ran on a model without BatchNorm")

    precise_bn(model, batches(), num_batches=5, forward=forward)
    assert drawn == [] and not any(m.training for m in model.modules())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(ValueError, match="needs 5 batches, the iterable gave 3"):
        precise_bn(_model(), _batches(3), num_batches=5)
