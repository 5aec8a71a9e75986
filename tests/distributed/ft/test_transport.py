"""The JSON state description of `distributed.ft.transport`: what a rejoining group receives is
rebuilt exactly, and nothing in it is executed (the transfer itself runs in
tests/train/ft/test_training.py, where a restarted group heals from a live peer)."""

from __future__ import annotations

import json

import pytest
import torch

from vidscale.distributed.ft.transport import describe, rebuild, tensor_specs
from vidscale.models.registry import ModelConfig, build_model


def test_a_model_and_optimizer_state_survive_the_description_exactly() -> None:
    model = build_model(ModelConfig(name="tsn_resnet18", num_classes=5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(1, 3, 2, 32, 32)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": (3, None)}
    tensors: list[torch.Tensor] = []
    text = json.dumps(describe(state, tensors))
    received = [torch.empty(shape, dtype=dtype) for dtype, shape in tensor_specs(json.loads(text))]
    for mine, sent in zip(received, tensors, strict=True):
        mine.copy_(sent)
    torch.testing.assert_close(rebuild(json.loads(text), received), state, rtol=0, atol=0)


@pytest.mark.parametrize(
    "node",
    [
        {"tensor": 0, "dtype": "torch.os", "shape": [1]},  # no such dtype: never a lookup
        {"tensor": 0, "dtype": "load", "shape": [1]},  # a torch function, not a dtype
        {"value": {"__reduce__": "os.system"}},  # only JSON scalars are values
        {"object": "builtins.eval"},  # no other kind of node
    ],
)
def test_a_description_that_is_not_state_is_refused(node: dict) -> None:
    with pytest.raises(ValueError):
        rebuild(node, [torch.zeros(1)]) if "tensor" not in node else tensor_specs(node)
