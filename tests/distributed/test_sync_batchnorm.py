"""Synchronised BatchNorm for multigrid phases whose per-device batch is below the BN base size
(Wu et al. §3.3): group sizes, the in-place switch, the CPU fallback, and on CUDA the real
statistics over 2 and 4 processes (gloo, so that they can share one GPU)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.env import DistEnv
from vidscale.distributed.sync_batchnorm import (
    GroupSyncBatchNorm,
    set_batchnorm_sync,
    sync_group_size,
)
from vidscale.models.batchnorm import set_batchnorm_splits
from vidscale.models.registry import ModelConfig, build_model
from vidscale.run.timeline import Phase, Shape
from vidscale.train.phases.phase_switch import PhaseSwitch

needs_cuda = pytest.mark.cuda  # skipped, with the reason, without CUDA (tests/conftest.py)


def env_of(world: int, device: str) -> DistEnv:
    return DistEnv(0, 0, world, world, torch.device(device), "gloo")


@pytest.mark.parametrize(
    ("world", "device", "devices", "size"),
    [
        (8, "cuda", 2, 2),
        (8, "cuda", 3, 2),  # groups tile the processes: 2 divides 8, 3 does not
        (8, "cuda", 16, 8),  # never more than there are
        (6, "cuda", 4, 3),
        (1, "cuda", 4, 1),  # one process: its "devices" are micro-batches
        (8, "cpu", 2, 1),  # SyncBatchNorm normalises CUDA tensors only
    ],
)
def test_sync_group_size(world: int, device: str, devices: int, size: int) -> None:
    assert sync_group_size(env_of(world, device), devices) == size


def test_sync_group_size_refuses_no_devices() -> None:
    with pytest.raises(ValueError, match="sync devices must be >= 1"):
        sync_group_size(env_of(2, "cuda"), 0)


def sync_phase(splits: int) -> Phase:
    return Phase(
        first_epoch=0,
        epochs=1,
        first_step=0,
        steps_per_epoch=1,
        shapes=(Shape(4, 32, 2),),
        accumulate=1,
        global_batch=4,
        bn_mode="sync_batchnorm",
        bn_splits=splits,
    )


def small_model() -> nn.Module:
    # No dropout: the CUDA test compares logits of two models.
    return build_model(ModelConfig(name="tsm_resnet18", num_classes=5, dropout=0.0))


def switch_on_cpu(env: DistEnv) -> dict[str, Any]:
    """What a sync phase does to a model on CPU ranks, and what the ranks can still do."""
    model = small_model()
    switch = PhaseSwitch(model, env)
    switch.enter(sync_phase(2))
    kinds = {
        type(m).__name__ for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
    }
    return {"kinds": kinds, "described": switch.describe_batchnorm(sync_phase(2))}


def test_cpu_ranks_keep_plain_batchnorm_and_say_why() -> None:
    results = run_ranks(switch_on_cpu, 2)
    for r in results:
        assert r["kinds"] == {"BatchNorm2d"}
        assert "BN synchronisation needs CUDA processes" in r["described"]
    one = switch_on_cpu(env_of(1, "cpu"))
    assert one["kinds"] == {"BatchNorm2d"}
    assert "its 2 devices are micro-batches of one process" in one["described"]


def convert_and_back(env: DistEnv) -> dict[str, Any]:
    """The switch itself (no training forward: on CPU that is torch's ValueError)."""
    model = small_model()
    before = {k: v for k, v in model.state_dict().items()}
    params = [id(p) for p in model.parameters()]
    buffers = [id(b) for b in model.buffers()]
    replaced = set_batchnorm_sync(model, 2)
    synced = [m for m in model.modules() if isinstance(m, GroupSyncBatchNorm)]
    out: dict[str, Any] = {
        "replaced": replaced,
        "synced": len(synced),
        "group_sizes": {m.group_size for m in synced},
        "group_world": {torch.distributed.get_world_size(m.process_group) for m in synced},
        "same_params": [id(p) for p in model.parameters()] == params,
        "same_buffers": [id(b) for b in model.buffers()] == buffers,
        "same_keys": list(model.state_dict()) == list(before),
        "again": set_batchnorm_sync(model, 2),  # already so: nothing replaced
    }
    model.eval()  # evaluation is plain BN on the running statistics, on any device
    with torch.no_grad():
        out["eval_shape"] = tuple(model(torch.randn(1, 3, 4, 32, 32)).shape)
    model.train()
    try:
        model(torch.randn(2, 3, 4, 32, 32))
        out["train_error"] = ""
    except ValueError as err:
        out["train_error"] = str(err)
    out["back"] = set_batchnorm_sync(model, 1)
    out["kinds_back"] = {
        type(m).__name__ for m in model.modules() if "BatchNorm" in type(m).__name__
    }
    out["same_params_back"] = [id(p) for p in model.parameters()] == params
    return out


def test_switch_in_place_shares_parameters_and_keys_and_reverts() -> None:
    for r in run_ranks(convert_and_back, 2):
        assert r["replaced"] == r["synced"] == r["back"] == 20  # every BN of ResNet-18
        assert r["group_sizes"] == {2} and r["group_world"] == {2}
        assert r["same_params"] and r["same_buffers"] and r["same_keys"]
        assert r["again"] == 0
        assert r["eval_shape"] == (1, 5)
        assert "SyncBatchNorm expected input tensor to be on GPU" in r["train_error"]
        assert r["kinds_back"] == {"BatchNorm2d"} and r["same_params_back"]


def test_sub_batch_layers_must_be_left_first() -> None:
    model = small_model()
    set_batchnorm_splits(model, 2)
    with pytest.raises(ValueError, match="set sub-batch splits to 1 first"):
        set_batchnorm_sync(model, 2)


# -- CUDA: the statistics really are the group's ---------------------------------------------


def sync_matches_one_big_batch(env: DistEnv, size: int) -> dict[str, Any]:
    """Each rank normalises its 3 clips with BN synchronised over groups of `size`; the
    reference is plain BN over the group's 3·size clips in one call, in float64."""
    torch.manual_seed(0)
    world_batch = torch.randn(env.world_size * 3, 6, 2, 5, 5, dtype=torch.float64)
    grad_out = torch.randn_like(world_batch)
    dev = env.device
    bn = nn.BatchNorm3d(6).double().to(dev)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    ref = nn.BatchNorm3d(6).double().to(dev)
    ref.load_state_dict(bn.state_dict())
    model = nn.Sequential(bn)
    set_batchnorm_sync(model, size)
    mine = slice(env.rank * 3, env.rank * 3 + 3)
    group = slice((env.rank // size) * 3 * size, (env.rank // size + 1) * 3 * size)
    x = world_batch[mine].to(dev).requires_grad_()
    y = model(x)
    y.backward(grad_out[mine].to(dev))
    x_ref = world_batch[group].to(dev).requires_grad_()
    y_ref = ref(x_ref)
    y_ref.backward(grad_out[group].to(dev))
    offset = (env.rank % size) * 3
    layer = model[0]
    assert isinstance(layer, GroupSyncBatchNorm)
    return {
        "out": (y - y_ref[offset : offset + 3]).abs().max().item(),
        "grad_in": (x.grad - x_ref.grad[offset : offset + 3]).abs().max().item(),  # type: ignore[index,operator]
        # Each rank holds its clips' share of the affine gradients; DDP sums them.
        "grad_w": layer.weight.grad.cpu(),  # type: ignore[union-attr]
        "ref_grad_w": ref.weight.grad.cpu(),  # type: ignore[union-attr]
        "mean": (layer.running_mean - ref.running_mean).abs().max().item(),  # type: ignore[operator]
        "var": (layer.running_var - ref.running_var).abs().max().item(),  # type: ignore[operator]
        "group_mean": layer.running_mean.cpu(),  # type: ignore[union-attr]
    }


@needs_cuda
@pytest.mark.parametrize(("world", "size"), [(2, 2), (4, 2)])
def test_cuda_statistics_are_the_groups(world: int, size: int) -> None:
    results = run_ranks(sync_matches_one_big_batch, world, size, device="cuda", timeout=300)
    for r in results:
        assert r["out"] < 1e-10 and r["grad_in"] < 1e-10
        assert r["mean"] < 1e-12 and r["var"] < 1e-12
    for g in range(world // size):
        members = results[g * size : (g + 1) * size]
        summed = sum(r["grad_w"] for r in members)
        assert torch.allclose(summed, members[0]["ref_grad_w"], atol=1e-10)
        assert all(torch.equal(r["group_mean"], members[0]["group_mean"]) for r in members)
    if world // size > 1:  # another group, other clips, other statistics
        assert not torch.allclose(results[0]["group_mean"], results[-1]["group_mean"])


def bf16_training_step(env: DistEnv) -> dict[str, Any]:
    """A TSM-ResNet-18 step under bf16 autocast and channels-last with BN synchronised over
    both ranks (the fast path's arithmetic), against the same 4 clips on one rank with plain
    BN in float32: the logits agree to bf16 precision."""
    torch.manual_seed(0)
    clips = torch.randn(4, 3, 4, 32, 32)
    # Module.to(memory_format=...) works at runtime, but torch's overloads of `to` omit it.
    model = small_model().to(env.device).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    reference = small_model().to(env.device)
    reference.load_state_dict(model.state_dict())
    switch = PhaseSwitch(model, env)
    switch.enter(sync_phase(2))
    mine = clips[env.rank * 2 : env.rank * 2 + 2].to(env.device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(mine).float()
    logits.sum().backward()
    ref_logits = reference(clips.to(env.device))[env.rank * 2 : env.rank * 2 + 2]
    error = (logits - ref_logits).norm() / ref_logits.norm()
    # The same step without synchronising: each rank's BN sees its own 2 clips only.
    alone = small_model().to(env.device)
    alone.load_state_dict(reference.state_dict())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        alone_logits = alone(mine).float()
    error_alone = (alone_logits - ref_logits).norm() / ref_logits.norm()
    grads_finite = all(
        torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None
    )
    with switch.plain_batchnorm():
        plain_inside = not any(isinstance(m, GroupSyncBatchNorm) for m in model.modules())
    return {
        "error": error.item(),
        "error_alone": error_alone.item(),
        "grads_finite": grads_finite,
        "described": switch.describe_batchnorm(sync_phase(2)),
        "plain_inside": plain_inside,
        "synced_after": sum(isinstance(m, GroupSyncBatchNorm) for m in model.modules()),
    }


@needs_cuda
def test_cuda_bf16_step_with_synchronised_batchnorm() -> None:
    for r in run_ranks(bf16_training_step, 2, device="cuda", timeout=300):
        assert r["error"] < 5e-2 and r["error_alone"] > 4 * r["error"], r
        assert r["grads_finite"]
        assert r["described"] == "BN synchronised over groups of 2 processes"
        assert r["plain_inside"] and r["synced_after"] == 20
