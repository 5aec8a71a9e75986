"""Weight decay on conv/linear weights only; BN parameters and biases excluded and flagged."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vidscale.optim.param_groups import EXCLUDE_KEY, split_decay_groups


class ConvBNLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(self.conv(x)).relu().mean(dim=(2, 3)))


def conv_bn_linear() -> ConvBNLinear:
    return ConvBNLinear()


def ids(params: list[torch.Tensor]) -> set[int]:
    return {id(p) for p in params}


def test_weights_decayed_bn_and_bias_not() -> None:
    model = conv_bn_linear()
    decay, keep = split_decay_groups(model, weight_decay=1e-4)
    assert decay["weight_decay"] == 1e-4 and decay[EXCLUDE_KEY] is False
    assert keep["weight_decay"] == 0.0 and keep[EXCLUDE_KEY] is True
    assert ids(decay["params"]) == ids([model.conv.weight, model.fc.weight])
    assert ids(keep["params"]) == ids([model.bn.weight, model.bn.bias, model.fc.bias])


def test_frozen_parameters_are_skipped() -> None:
    model = conv_bn_linear()
    model.conv.weight.requires_grad_(False)
    model.bn.bias.requires_grad_(False)
    groups = split_decay_groups(model, weight_decay=1e-4)
    listed = {id(p) for g in groups for p in g["params"]}
    assert id(model.conv.weight) not in listed and id(model.bn.bias) not in listed
    assert len(listed) == 3


def test_empty_group_is_left_out() -> None:
    groups = split_decay_groups(nn.Linear(3, 2, bias=False), weight_decay=1e-4)
    assert len(groups) == 1 and groups[0][EXCLUDE_KEY] is False


def test_torch_sgd_decays_only_the_weights() -> None:
    # With zero gradients, one SGD step moves exactly the decayed parameters.
    model = conv_bn_linear()
    nn.init.constant_(model.bn.weight, 2.0)
    nn.init.constant_(model.fc.bias, 3.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(split_decay_groups(model, weight_decay=0.5), lr=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for name, p in model.named_parameters():
        factor = 1 - 0.1 * 0.5 if p.ndim > 1 else 1.0
        torch.testing.assert_close(p.detach(), before[name] * factor, msg=name)


def test_rejects_negative_decay_and_empty_models() -> None:
    with pytest.raises(ValueError, match="weight_decay"):
        split_decay_groups(conv_bn_linear(), weight_decay=-1.0)
    with pytest.raises(ValueError, match="no trainable parameters"):
        split_decay_groups(nn.ReLU(), weight_decay=1e-4)
