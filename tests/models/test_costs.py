"""The one model-cost counter: its per-layer table and its total agree wherever every
multiplication belongs to a layer, and differ by exactly the non-local attention where not."""

from __future__ import annotations

import pytest

from vidscale.models.costs import model_costs, model_info
from vidscale.models.registry import ModelConfig


@pytest.mark.parametrize(
    "name", ["tsm_resnet50", "i3d_resnet50_3x3x3", "slowfast_resnet50_4x16", "resnet50"]
)
def test_the_layers_hold_every_mac_of_a_model_without_attention(name: str) -> None:
    costs = model_costs(name, frames=8 if name != "resnet50" else 1, size=112)
    assert costs.total_macs > 0 and costs.unowned_macs == 0
    info = model_info(ModelConfig(name=name), frames=costs.frames, size=112)
    assert (info.macs, info.params) == (costs.total_macs, costs.params)


def test_non_local_attention_is_counted_in_the_total_and_owned_by_no_layer() -> None:
    """Each non-local block multiplies theta by phi and the attention by g: 2 x (THW)² x C/2
    MACs per block, between activations."""
    plain = model_costs("i3d_resnet50_3x1x1", frames=8, size=112)
    nonlocal_ = model_costs("i3d_nl_resnet50_3x1x1", frames=8, size=112)
    assert plain.unowned_macs == 0 and nonlocal_.unowned_macs > 0
    assert nonlocal_.total_macs == nonlocal_.macs + nonlocal_.unowned_macs
