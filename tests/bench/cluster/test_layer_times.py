"""`bench.cluster.layer_times`: a real backward timed layer by layer on one process, turned into
the stand-in's per-layer waits, and a stand-in whose gradients then come when those say."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.bench.cluster.test_report import RECORDED
from vidscale.bench.cluster.config import ClipShape
from vidscale.bench.cluster.layer_times import BackwardTiming, chain_shares, measure_backward
from vidscale.bench.cluster.report import ClusterResult, format_calibration
from vidscale.bench.cluster.standin import (
    Clock,
    ComputeProfile,
    StandInModel,
    layer_params,
    owned_layers,
)
from vidscale.models.costs import model_costs
from vidscale.models.registry import ModelConfig, build_model

MODEL = "tsm_resnet18"
SHAPE = ClipShape(batch=2, frames=2, size=64, num_classes=10)


def test_each_layer_waits_what_its_gradients_came_later_than_every_layer_after_it() -> None:
    # Forward order; backward goes from the last. The second layer's gradients came before
    # the third's, but the chain releases the third first: the second waits nothing more.
    assert chain_shares((0.9, 0.4, 0.5, 0.1)) == pytest.approx((0.5, 0.0, 0.4, 0.1))
    # Backward's time after the first layer's gradients (the input's gradient, freeing) is
    # that layer's: the shares always sum to 1.
    assert chain_shares((0.8, 0.3)) == pytest.approx((0.7, 0.3))
    assert sum(chain_shares((1.2, 0.5, 0.0))) == pytest.approx(1.0)  # ready after the end
    assert chain_shares(()) == ()


def test_a_real_backward_measured_gives_one_share_per_stand_in_layer() -> None:
    timing = measure_backward(MODEL, SHAPE, reps=2)
    real = build_model(ModelConfig(name=MODEL, num_classes=10, frames=2, dropout=0.0))
    costs = model_costs(MODEL, frames=2, size=64, num_classes=10)
    layers = owned_layers(real, costs)
    assert len(timing.shares) == len(timing.ready) == len(timing.sizes) == len(layers)
    assert timing.sizes == tuple(sum(p.numel() for p in layer_params(m)) for m, _ in layers)
    assert min(timing.shares) >= 0 and sum(timing.shares) == pytest.approx(1.0)
    # Backward costs more than forward (about two forwards of MACs), never all of the step.
    assert 0.4 < timing.fraction < 0.95, timing.fraction
    # The classifier's gradients come first, at the start of backward; the stem's last, near
    # its end; half the parameters' somewhere between.
    assert timing.ready[-1] < 0.2 and timing.ready[0] > 0.6, (timing.ready[-1], timing.ready[0])
    assert timing.ready[-1] < timing.half_ready < timing.ready[0]


def test_a_stand_in_releases_each_layer_s_gradients_after_its_measured_share() -> None:
    real = build_model(ModelConfig(name=MODEL, num_classes=10, frames=2, dropout=0.0))
    costs = model_costs(MODEL, frames=2, size=32, num_classes=10)
    layers = owned_layers(real, costs)
    # All of backward in the stem (the first layer): every other layer's gradients come at
    # once, the stem's after the whole backward.
    shares = (1.0,) + (0.0,) * (len(layers) - 1)
    profile = ComputeProfile(0.0, 0.3, 0.0, shares)
    model = StandInModel(real, costs, profile, num_classes=10, clock=Clock(shared_core=False))
    arrived: dict[int, float] = {}

    def noting(index: int) -> Callable[[torch.Tensor], None]:
        def note(_: torch.Tensor) -> None:
            arrived.setdefault(index, time.perf_counter())

        return note

    for index, (module, _) in enumerate(layers):
        for param in layer_params(module):
            param.register_post_accumulate_grad_hook(noting(index))
    logits = model(torch.zeros(2, 1))
    start = time.perf_counter()
    F.cross_entropy(logits, torch.zeros(2, dtype=torch.long)).backward()
    assert set(arrived) == set(range(len(layers)))
    assert max(arrived[i] for i in range(1, len(layers))) - start < 0.1
    assert arrived[0] - start > 0.29
    with pytest.raises(ValueError, match="backward shares"):
        StandInModel(real, costs, replace(profile, backward_shares=(1.0,)), num_classes=10,
                     clock=Clock(shared_core=False))  # fmt: skip


def test_a_result_keeps_the_measured_backward_and_says_it(tmp_path: Path) -> None:
    timing = BackwardTiming(0.7, (1.0, 0.4), (10, 30))
    assert timing.half_ready == 0.4  # the second layer holds most parameters, ready first
    recorded = ClusterResult.read(RECORDED)
    assert recorded.calibration.backward == {}  # written before the backward was measured
    calibration = replace(recorded.calibration, backward={"tsm_resnet50": timing})
    result = replace(recorded, calibration=calibration)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(result.to_dict()))
    read = ClusterResult.read(path)
    assert read.calibration.backward == {"tsm_resnet50": timing}
    said = format_calibration(calibration, {m: 1.0 for m in calibration.alone_s})
    assert "stand-in backward: tsm_resnet50 70.0% of forward and backward" in said
    assert "half its parameters' gradients ready at 40% of it" in said
