"""The data-parallel strategy the loop calls: DDP's behaviour behind the interface."""

from __future__ import annotations

import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.comm_hooks import CommConfig
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.distributed.strategy import build_strategy


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))


def backward(net: nn.Module, env: DistEnv, step: int) -> None:
    g = torch.Generator().manual_seed(10 * step + env.rank)  # different data on every rank
    nn.functional.cross_entropy(
        net(torch.randn(4, 6, generator=g)), torch.tensor([0, 1, 2, 0])
    ).backward()


def test_one_process_is_a_no_op() -> None:
    strategy = build_strategy(init_distributed("cpu"), CommConfig())
    net = model()
    assert strategy.wrap(net) is net
    with strategy.micro_batch(last=False):
        backward(net, init_distributed("cpu"), 0)
    strategy.after_step(step=1)
    strategy.synchronize()
    assert strategy.take_bytes() == 0 and strategy.state_dict() == {}
    assert strategy.incompatibility({}) is None


def ddp_behaviour(env: DistEnv) -> dict[str, object]:
    strategy = build_strategy(env, CommConfig())
    net = model()
    wrapped = strategy.wrap(net)
    with strategy.micro_batch(last=False):  # accumulation: nothing is sent
        backward(wrapped, env, 0)
    local = [p.grad.clone() for p in net.parameters()]
    with strategy.micro_batch(last=True):  # the step's last micro-batch: all-reduced
        backward(wrapped, env, 1)
    summed = [p.grad.clone() for p in net.parameters()]
    net[1].running_mean.fill_(float(env.rank))  # BN statistics that drifted apart
    strategy.synchronize()
    return {
        "local": local,
        "summed": summed,
        "bytes": strategy.take_bytes(),
        "running_mean": net[1].running_mean.clone(),
    }


def test_ddp_sends_on_the_last_micro_batch_and_synchronizes_buffers() -> None:
    r0, r1 = run_ranks(ddp_behaviour, 2)
    assert any(not torch.equal(a, b) for a, b in zip(r0["local"], r1["local"], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(r0["summed"], r1["summed"], strict=True))
    params = sum(p.numel() for p in model().parameters())
    assert r0["bytes"] == r1["bytes"] == 4 * params  # one fp32 all-reduce of every gradient
    assert torch.equal(r1["running_mean"], torch.zeros(8))  # rank 0's, on every rank
