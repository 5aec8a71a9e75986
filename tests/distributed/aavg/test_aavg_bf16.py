"""AAVG's merge when the steps run in bf16 autocast, on 2 real gloo processes, for a 3-D and a
2-D video model: every measured step applies its update, an averaging carries the parameters,
the momentum and the BatchNorm statistics (no fewer bytes than in fp32), and after it every
rank's momentum is the mean of the ranks' momenta before it (Cong et al. Alg. 2 with optimizer
state merged).

A bf16 kernel that gave non-finite gradients made every step skip, so no momentum existed and an
averaging carried half the bytes, unnoticed (docs/benchmarks.md). The models and shapes here
avoid the bf16 convolution shapes torch 2.13 gets wrong on some CPUs (depth 1 or 2 in time):
slow_resnet50_8x8 keeps 8 frames deep through every stage.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.collectives import all_gather_object
from vidscale.distributed.env import DistEnv
from vidscale.distributed.strategy import build_strategy
from vidscale.distributed.sync.comm_hooks import CommConfig
from vidscale.fastpath.settings import FastPath
from vidscale.models.registry import ModelConfig, build_model
from vidscale.optim.factory import OptimConfig, build_optimizer
from vidscale.step.fixed_batch import FixedBatchStep

K = 2


def momenta(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [
        s["momentum_buffer"].clone()
        for s in optimizer.state.values()
        if s.get("momentum_buffer") is not None
    ]


def aavg_in_bf16(env: DistEnv, name: str) -> dict[str, Any]:
    """K bf16 steps of `name` on different data per rank, then the averaging."""
    torch.set_num_threads(1)  # as every torchrun rank trains by default
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, num_classes=10, frames=8)).train()
    optimizer = build_optimizer(model, OptimConfig(name="sgd", momentum=0.9), lr=0.01)
    strategy = build_strategy(env, CommConfig(), name="aavg", aavg=AAVGConfig(k=K))
    wrapped = strategy.wrap(model, optimizer)
    g = torch.Generator().manual_seed(1 + env.rank)  # different clips on every rank
    clips, labels = torch.randn(2, 3, 8, 32, 32, generator=g), torch.randint(10, (2,), generator=g)
    fast = FastPath(env.device, True, False, compile=False)
    step = FixedBatchStep(wrapped, clips, labels, optimizer=optimizer, autocast=fast.autocast())
    applied = []
    for k in range(1, K + 1):
        result = step()
        applied.append((result.applied, result.nonfinite))
        if k == K:
            before = momenta(optimizer)
        strategy.after_step(step_in_epoch=k, epoch_end=False)
    traffic = strategy.take_traffic()
    everyone = all_gather_object(before)
    mean = [torch.stack(ts).mean(0) for ts in zip(*everyone, strict=True)]
    after = momenta(optimizer)
    state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    tracked = sum(
        b.numel() * b.element_size() for n, b in model.named_buffers() if "num_batches" in n
    )
    return {
        "applied": applied,
        "bytes": traffic.bytes_sent,
        "rounds": traffic.rounds,
        "model_bytes": state_bytes - tracked,  # parameters + BN statistics
        "momentum_bytes": sum(t.numel() * t.element_size() for t in before),
        "params": sum(p.numel() for p in model.parameters()),
        "momenta": len(before),
        "error": max(float((a - m).abs().max()) for a, m in zip(after, mean, strict=True)),
        "moved": any(not torch.equal(a, b) for a, b in zip(after, before, strict=True)),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ["slow_resnet50_8x8", "tsm_resnet18"])
def test_aavg_in_bf16_trains_and_averages_the_momentum(name: str) -> None:
    ranks = run_ranks(aavg_in_bf16, 2, name, timeout=300)
    for r in ranks:
        assert r["applied"] == [(True, "")] * K  # every step trained
        assert r["momenta"] == len(list(build_model(ModelConfig(name=name)).parameters()))
        assert r["rounds"] == 1
        # One averaging of the parameters, the BN statistics and the momentum, in fp32.
        assert r["bytes"] == r["model_bytes"] + r["momentum_bytes"]
        assert r["momentum_bytes"] == 4 * r["params"]
        assert r["moved"] and r["error"] < 1e-6  # each rank's momentum is now the mean
