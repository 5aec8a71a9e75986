"""The data-parallel strategies the loop calls: DDP, and AAVG's K-step model averaging, on 2
real gloo processes (Cong et al. Alg. 1-2; DESIGN §6)."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.distributed.strategy import build_strategy
from vidscale.distributed.sync.comm_hooks import CommConfig
from vidscale.distributed.traffic import Traffic
from vidscale.optim.factory import OptimConfig, build_optimizer


def model(*, bn: bool = True) -> nn.Sequential:
    torch.manual_seed(0)
    if not bn:
        return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))


def backward(net: nn.Module, env: DistEnv, step: int) -> None:
    g = torch.Generator().manual_seed(10 * step + env.rank)  # different data on every rank
    x = torch.randn(4, 6, generator=g) + env.rank  # and a different BN mean
    nn.functional.cross_entropy(net(x), torch.tensor([0, 1, 2, 0])).backward()


def sgd(net: nn.Module) -> torch.optim.Optimizer:
    opt = build_optimizer(net, OptimConfig(name="sgd", momentum=0.9, weight_decay=1e-3), lr=0.1)
    return opt


def adam(net: nn.Module) -> torch.optim.Optimizer:
    return build_optimizer(net, OptimConfig(name="adamw", weight_decay=0.0), lr=0.01)


@pytest.mark.parametrize("name", ["ddp", "aavg"])
def test_one_process_is_a_no_op(name: str) -> None:
    env = init_distributed("cpu")
    strategy = build_strategy(env, CommConfig(), name=name, aavg=AAVGConfig(k=1))
    net = model()
    opt = sgd(net)
    assert strategy.wrap(net, opt) is net
    with strategy.micro_batch(last=False):
        backward(net, env, 0)
    opt.step()
    before = [p.clone() for p in net.parameters()]
    strategy.after_step(step_in_epoch=1, epoch_end=True)
    with strategy.consensus():
        pass
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    assert strategy.take_traffic() == Traffic()
    assert not strategy.per_rank


def _grad(p: torch.Tensor) -> torch.Tensor:
    assert p.grad is not None
    return p.grad


def ddp_behaviour(env: DistEnv) -> dict[str, object]:
    strategy = build_strategy(env, CommConfig())
    net = model()
    wrapped = strategy.wrap(net, sgd(net))
    with strategy.micro_batch(last=False):  # accumulation: nothing is sent
        backward(wrapped, env, 0)
    local = [_grad(p).clone() for p in net.parameters()]
    with strategy.micro_batch(last=True):  # the step's last micro-batch: all-reduced
        backward(wrapped, env, 1)
    summed = [_grad(p).clone() for p in net.parameters()]
    bn = cast(nn.BatchNorm1d, net[1])
    assert bn.running_mean is not None
    bn.running_mean.fill_(float(env.rank))  # BN statistics that drifted apart
    with strategy.consensus():
        inside = bn.running_mean.clone()
    return {"local": local, "summed": summed, "traffic": strategy.take_traffic(), "inside": inside}


def test_ddp_sends_on_the_last_micro_batch_and_agrees_on_buffers() -> None:
    r0, r1 = run_ranks(ddp_behaviour, 2)
    assert any(not torch.equal(a, b) for a, b in zip(r0["local"], r1["local"], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(r0["summed"], r1["summed"], strict=True))
    params = sum(p.numel() for p in model().parameters())
    for r in (r0, r1):
        assert r["traffic"].bytes_sent == 4 * params  # one fp32 all-reduce of every gradient
        assert r["traffic"].rounds == 1
    assert torch.equal(r1["inside"], torch.zeros(8))  # rank 0's, on every rank


def twenty_steps(env: DistEnv, name: str) -> list[torch.Tensor]:
    """20 SGD-with-momentum steps of a BN-free model under strategy `name` (K = 1)."""
    net = model(bn=False)
    opt = sgd(net)
    cfg = AAVGConfig(k=1, merge_optimizer_state=True)
    strategy = build_strategy(env, CommConfig(), name=name, aavg=cfg)
    wrapped = strategy.wrap(net, opt)
    for step in range(1, 21):
        with strategy.micro_batch(last=True):
            backward(wrapped, env, step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        strategy.after_step(step_in_epoch=step, epoch_end=False)
    return [p.detach().clone() for p in net.parameters()]


def k1_against_ddp(env: DistEnv) -> dict[str, list[torch.Tensor]]:
    return {"ddp": twenty_steps(env, "ddp"), "aavg": twenty_steps(env, "aavg")}


def test_aavg_with_k1_equals_ddp() -> None:
    """§III-A: with K = 1 AAVG is hard-synchronised SGD (momentum and weight decay are linear
    in the weights and the gradient, so averaging after the local step equals stepping with the
    averaged gradient)."""
    r0, r1 = run_ranks(k1_against_ddp, 2)
    for r in (r0, r1):
        for a, b in zip(r["ddp"], r["aavg"], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    start = [p.detach() for p in model(bn=False).parameters()]
    assert any(not torch.allclose(a, b) for a, b in zip(r0["aavg"], start, strict=True))


def replicas(net: nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Every tensor a replica holds: parameters, buffers, optimizer state."""
    out = {f"model.{k}": v.detach().clone() for k, v in net.state_dict().items()}
    for i, state in enumerate(opt.state_dict()["state"].values()):
        for k, v in state.items():
            if torch.is_tensor(v):
                out[f"opt.{i}.{k}"] = v.clone()
    return out


def k3_with_adam(env: DistEnv) -> dict[str, Any]:
    """K = 3, Adam, BN: averaging after steps 3 and 6, a local step 7, and a consensus."""
    net = model()
    opt = adam(net)
    strategy = build_strategy(env, CommConfig(), name="aavg", aavg=AAVGConfig(k=3))
    strategy.wrap(net, opt)
    seen: dict[str, Any] = {"traffic": []}
    for step in range(1, 8):
        backward(net, env, step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        strategy.after_step(step_in_epoch=step, epoch_end=False)
        seen["traffic"].append(strategy.take_traffic())
        if step == 6:
            seen["after_6"] = replicas(net, opt)
    seen["after_7"] = own = replicas(net, opt)
    with strategy.consensus():
        seen["inside"] = replicas(net, opt)
    seen["restored"] = replicas(net, opt)
    seen["state"] = strategy.state_dict()
    seen["bytes"] = sum(
        v.numel() * v.element_size()
        for k, v in own.items()
        if "step" not in k and "num_batches" not in k
    )
    return seen


def test_aavg_replicas_are_bitwise_identical_after_each_averaging() -> None:
    r0, r1 = run_ranks(k3_with_adam, 2)
    for key in r0["after_6"]:
        assert torch.equal(r0["after_6"][key], r1["after_6"][key]), key
        assert torch.equal(r0["inside"][key], r1["inside"][key]), key
    diverged = [k for k in r0["after_7"] if not torch.equal(r0["after_7"][k], r1["after_7"][k])]
    assert any(k.startswith("model.0.") for k in diverged)  # step 7 was local
    for r in (r0, r1):  # leaving consensus hands each rank its own replica back, bitwise
        assert all(torch.equal(r["after_7"][k], r["restored"][k]) for k in r["after_7"])
        rounds = [t.rounds for t in r["traffic"]]
        assert rounds == [0, 0, 1, 0, 0, 1, 0]
        # One averaging sends every floating tensor of the replica once (parameters, Adam's
        # m and v, BN mean and variance), step counters excluded.
        assert r["traffic"][2].bytes_sent == r["bytes"] > 0
        assert r["traffic"][2].seconds > 0
        assert not r["state"]["in_sync"] and "model" in r["state"]


def per_epoch(env: DistEnv) -> list[int]:
    net = model()
    opt = sgd(net)
    strategy = build_strategy(env, CommConfig(), name="aavg", aavg=AAVGConfig(k=-1))
    strategy.wrap(net, opt)
    rounds = []
    for step in range(1, 6):
        backward(net, env, step)
        opt.step()
        strategy.after_step(step_in_epoch=step, epoch_end=step == 5)
        rounds.append(strategy.take_traffic().rounds)
    return rounds


def test_k_minus_one_averages_at_the_epoch_end_only() -> None:
    assert run_ranks(per_epoch, 2) == [[0, 0, 0, 0, 1]] * 2


def state_round_trip(env: DistEnv) -> dict[str, Any]:
    net = model()
    opt = sgd(net)
    strategy = build_strategy(env, CommConfig(), name="aavg", aavg=AAVGConfig(k=4))
    strategy.wrap(net, opt)
    backward(net, env, 1)
    opt.step()
    strategy.after_step(step_in_epoch=1, epoch_end=False)
    saved = copy.deepcopy(strategy.state_dict())  # what a checkpoint file holds
    own = replicas(net, opt)
    fresh_net = model()
    fresh_opt = sgd(fresh_net)
    fresh = build_strategy(env, CommConfig(), name="aavg", aavg=AAVGConfig(k=4))
    fresh.wrap(fresh_net, fresh_opt)
    fresh.load_state_dict(saved)
    other = dict(saved, world_size=3)
    return {
        "same": all(torch.equal(own[k], v) for k, v in replicas(fresh_net, fresh_opt).items()),
        "problem": fresh.incompatibility(other),
    }


def test_a_learner_replica_round_trips_through_its_state() -> None:
    for r in run_ranks(state_round_trip, 2):
        assert r["same"]
        assert "3 learners" in r["problem"] and "has 2" in r["problem"]
