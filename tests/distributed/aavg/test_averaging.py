"""Model averaging on 2 real gloo processes, against the vectors of the AAVG paper's Alg. 2."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.aavg.averaging import FlatBuffers, average_replicas
from vidscale.distributed.env import DistEnv


def replica(env: DistEnv) -> tuple[nn.Sequential, torch.optim.Optimizer]:
    """A linear layer and a BatchNorm whose values differ per rank as in DESIGN §6."""
    model = nn.Sequential(nn.Linear(2, 1, bias=False), nn.BatchNorm1d(1))
    linear, bn = _layers(model)
    assert bn.running_mean is not None and bn.running_var is not None
    with torch.no_grad():
        linear.weight.copy_(torch.randn(1, 2, generator=torch.Generator().manual_seed(env.rank)))
        bn.running_mean.fill_([0.0, 2.0][env.rank])
        bn.running_var.fill_(1.0)
    optimizer = torch.optim.Adam(linear.parameters())
    p = linear.weight
    optimizer.state[p] = {
        "step": torch.tensor(3.0),
        "exp_avg": torch.tensor([[[1.0, 2.0], [3.0, 2.0]][env.rank]]),
        "exp_avg_sq": torch.tensor([[[1.0, 4.0], [9.0, 0.0]][env.rank]]),
    }
    return model, optimizer


def _layers(model: nn.Sequential) -> tuple[nn.Linear, nn.BatchNorm1d]:
    """`replica`'s two layers, typed."""
    return cast(nn.Linear, model[0]), cast(nn.BatchNorm1d, model[1])


def averaged(env: DistEnv, merge_optimizer_state: bool, merge_bn: bool) -> dict[str, object]:
    model, optimizer = replica(env)
    stats = average_replicas(
        model, optimizer, merge_optimizer_state=merge_optimizer_state, merge_bn=merge_bn
    )
    linear, bn = _layers(model)
    assert bn.running_mean is not None and bn.running_var is not None
    state = optimizer.state[linear.weight]
    return {
        "weight": linear.weight.detach().clone(),
        "bn": (bn.running_mean.clone(), bn.running_var.clone()),
        "m": state["exp_avg"].clone(),
        "v": state["exp_avg_sq"].clone(),
        "step": state["step"].clone(),
        "bytes": stats.bytes_sent,
        "collectives": stats.collectives,
    }


def test_alg2_vectors_and_bitwise_identical_replicas() -> None:
    r0, r1 = run_ranks(averaged, 2, True, True)
    assert torch.equal(r0["bn"][0], torch.tensor([1.0])) and torch.equal(
        r0["bn"][1], torch.tensor([2.0])
    )
    assert torch.equal(r0["m"], torch.tensor([[2.0, 2.0]]))
    assert torch.equal(r0["v"], torch.tensor([[5.0, 2.0]]))
    assert torch.equal(r0["step"], torch.tensor(3.0))  # counters agree already: untouched
    for key in ("weight", "m", "v"):
        assert torch.equal(r0[key], r1[key]), key  # bitwise, not approximately
    assert all(torch.equal(a, b) for a, b in zip(r0["bn"], r1["bn"], strict=True))
    w = (
        torch.randn(1, 2, generator=torch.Generator().manual_seed(0))
        + torch.randn(1, 2, generator=torch.Generator().manual_seed(1))
    ) / 2
    torch.testing.assert_close(r0["weight"], w)
    # One flat fp32 all-reduce: weights (2 + BN's 2) + m (2) + v (2) + BN mean and var (1 + 1).
    assert (r0["bytes"], r0["collectives"]) == (4 * 10, 1)


def test_without_the_customisation_bn_is_averaged_plainly_and_adam_state_kept() -> None:
    r0, r1 = run_ranks(averaged, 2, False, False)
    assert torch.equal(r0["bn"][1], torch.tensor([1.0]))  # plain mean of the variances
    assert torch.equal(r0["m"], torch.tensor([[1.0, 2.0]]))  # each rank keeps its own
    assert torch.equal(r1["m"], torch.tensor([[3.0, 2.0]]))
    assert torch.equal(r0["weight"], r1["weight"])


def averaged_twice_with_kept_buffers(env: DistEnv) -> dict[str, object]:
    """Two averagings through one `FlatBuffers`, the second of replicas that differ again."""
    model, optimizer = replica(env)
    buffers = FlatBuffers()
    average_replicas(model, optimizer, buffers=buffers)
    address = buffers.get(torch.float32, torch.device("cpu"), 1).data_ptr()
    linear, _ = _layers(model)
    with torch.no_grad():
        linear.weight.add_(float(env.rank))  # the replicas part again, as after local steps
    average_replicas(model, optimizer, buffers=buffers)
    return {
        "weight": linear.weight.detach().clone(),
        "m": optimizer.state[linear.weight]["exp_avg"].clone(),
        "same_buffer": buffers.get(torch.float32, torch.device("cpu"), 10).data_ptr() == address,
    }


def test_kept_buffers_are_reused_and_average_as_fresh_ones() -> None:
    r0, r1 = run_ranks(averaged_twice_with_kept_buffers, 2)
    # The first averaging's weight plus the mean of the ranks' offsets (0 and 1).
    w = (
        torch.randn(1, 2, generator=torch.Generator().manual_seed(0))
        + torch.randn(1, 2, generator=torch.Generator().manual_seed(1))
    ) / 2 + 0.5
    torch.testing.assert_close(r0["weight"], w)
    assert torch.equal(r0["weight"], r1["weight"])
    assert torch.equal(r0["m"], torch.tensor([[2.0, 2.0]]))  # the mean of a mean is itself
    assert r0["same_buffer"] and r1["same_buffer"]


def test_flat_buffers_grow_to_the_largest_size_and_never_shrink() -> None:
    buffers = FlatBuffers()
    small = buffers.get(torch.float32, torch.device("cpu"), 4)
    large = buffers.get(torch.float32, torch.device("cpu"), 8)
    again = buffers.get(torch.float32, torch.device("cpu"), 4)
    assert (small.numel(), large.numel(), again.numel()) == (4, 8, 4)
    assert again.data_ptr() == large.data_ptr() != small.data_ptr()
    assert buffers.get(torch.float64, torch.device("cpu"), 4).dtype == torch.float64


def test_one_process_sends_nothing() -> None:
    model = nn.Linear(2, 1)
    before = model.weight.detach().clone()
    stats = average_replicas(model)
    assert (stats.bytes_sent, stats.collectives) == (0, 0)
    assert torch.equal(model.weight, before)
