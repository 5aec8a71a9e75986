"""The comm hook's state survives a checkpoint: a resumed PowerSGD run is bit-exact (2 gloo ranks)."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from tests.distributed.sync.test_comm_hooks import backward_on_random_batch, deep_model, grad_of
from vidscale.distributed.env import DistEnv
from vidscale.distributed.sync.comm_hooks import CommConfig, CommHook, attach_comm_hook
from vidscale.distributed.sync.ddp import unwrap, wrap_ddp

STEPS = 6
POWERSGD = CommConfig(hook="powersgd", powersgd_rank=2, powersgd_start_step=2)

# Per step: (gradients after the all-reduce, parameters after the SGD step).
Trace = list[tuple[list[torch.Tensor], list[torch.Tensor]]]


def build(env: DistEnv, bucket_cap_mb: float) -> tuple[nn.Module, torch.optim.Optimizer, CommHook]:
    ddp = wrap_ddp(deep_model(), env, bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    return ddp, optimizer, attach_comm_hook(ddp, POWERSGD)


def train(env: DistEnv, ddp: nn.Module, optimizer: torch.optim.Optimizer, steps: range) -> Trace:
    trace: Trace = []
    for step in steps:
        backward_on_random_batch(ddp, env, step, features=48)
        grads = [grad_of(p) for p in ddp.parameters()]
        optimizer.step()
        trace.append((grads, [p.detach().clone() for p in ddp.parameters()]))
    return trace


def through_checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """`state` saved and loaded as the trainer does (weights_only: plain data only)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer, weights_only=True)
    return loaded


def resumed(
    env: DistEnv, bucket_cap_mb: float, stop: int, *, restore_comm: bool
) -> tuple[Trace, dict[str, Any]]:
    """`stop` steps, a checkpoint, then a fresh model, DDP and hook that finish the run."""
    ddp, optimizer, comm = build(env, bucket_cap_mb)
    trace = train(env, ddp, optimizer, range(stop))
    saved = through_checkpoint(
        {
            "model": unwrap(ddp).state_dict(),
            "optimizer": optimizer.state_dict(),
            "comm": comm.state_dict(),
        }
    )
    del ddp, optimizer, comm
    ddp, optimizer, comm = build(env, bucket_cap_mb)
    unwrap(ddp).load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    if restore_comm:
        comm.load_state_dict(saved["comm"])
    return trace + train(env, ddp, optimizer, range(stop, STEPS)), saved["comm"]


def resume_runs(env: DistEnv, bucket_cap_mb: float) -> dict[str, Any]:
    ddp, optimizer, comm = build(env, bucket_cap_mb)
    uninterrupted = train(env, ddp, optimizer, range(STEPS))
    assert comm.per_rank
    return {
        "uninterrupted": uninterrupted,
        # 3: mid-compression; 2: saved just before PowerSGD's first compressed step.
        "resumed": {stop: resumed(env, bucket_cap_mb, stop, restore_comm=True) for stop in (2, 3)},
        "without_comm_state": resumed(env, bucket_cap_mb, 3, restore_comm=False)[0],
    }


def mismatch_errors(env: DistEnv) -> list[str]:
    """Saved states that do not fit this rank's hook are refused, and the hook is unchanged."""
    ddp, optimizer, comm = build(env, 0.01)
    train(env, ddp, optimizer, range(3))
    state = comm.state_dict()
    other = 1 - env.rank
    messages = []
    for bad in (
        {**state, "world_size": 4},
        {**state, "rank": other},
        {**state, "matrix_approximation_rank": 4},
        {**state, "params": {"extra.weight": {"error": torch.zeros(3)}}},
        {},
    ):
        with pytest.raises(ValueError) as refused:
            comm.load_state_dict(bad)
        messages.append(str(refused.value))
    assert all(
        torch.equal(a, b) for a, b in zip(*(_flat(comm.state_dict()), _flat(state)), strict=True)
    )
    with pytest.raises(ValueError, match="comm.hook='powersgd'"):
        attach_comm_hook(wrap_ddp(deep_model(), env), CommConfig(hook="bf16")).load_state_dict(
            state
        )
    return messages


BUCKET_CAPS = {"one-bucket": 25.0, "many-buckets": 0.01}


def all_runs(env: DistEnv) -> dict[str, Any]:
    """Everything the tests below check, in one pair of processes (their start-up dominates)."""
    runs: dict[str, Any] = {name: resume_runs(env, cap) for name, cap in BUCKET_CAPS.items()}
    runs["refusals"] = mismatch_errors(env)
    return runs


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(all_runs, 2, timeout=120)


def _flat(state: dict[str, Any]) -> list[torch.Tensor]:
    return [t for _, entry in sorted(state["params"].items()) for _, t in sorted(entry.items())]


def assert_equal_traces(a: Trace, b: Trace) -> None:
    for step, ((ga, pa), (gb, pb)) in enumerate(zip(a, b, strict=True)):
        for x, y in zip(ga + pa, gb + pb, strict=True):
            assert torch.equal(x, y), f"step {step} differs"


@pytest.mark.slow
@pytest.mark.parametrize("layout", BUCKET_CAPS)
def test_powersgd_resume_is_bit_exact(ranks: list[dict[str, Any]], layout: str) -> None:
    """A fresh DDP runs its first step on one bucket in parameter order and regroups by gradient
    order before its second, while the saved state comes from the regrouped layout: with 25 MB
    the one bucket's order changes, with 0.01 MB it splits into five."""
    for run in (r[layout] for r in ranks):
        for trace, _ in run["resumed"].values():
            assert_equal_traces(trace, run["uninterrupted"])
        # Negative control: the same resume without the comm state diverges at once.
        gradients = run["without_comm_state"][3][0]
        expected = run["uninterrupted"][3][0]
        assert not all(torch.equal(a, b) for a, b in zip(gradients, expected, strict=True))


@pytest.mark.parametrize("layout", BUCKET_CAPS)
def test_powersgd_state_differs_between_ranks_only_in_residuals(
    ranks: list[dict[str, Any]], layout: str
) -> None:
    """P, Q and iter agree bit for bit across ranks; the error residuals do not."""
    (_, state0), (_, state1) = ranks[0][layout]["resumed"][3], ranks[1][layout]["resumed"][3]
    assert state0["iter"] == state1["iter"] == 3
    assert (state0["rank"], state1["rank"]) == (0, 1)
    params0, params1 = state0["params"], state1["params"]
    assert params0.keys() == params1.keys() == {n for n, _ in deep_model().named_parameters()}
    assert any("q" in entry for entry in params0.values())
    for name, entry in params0.items():
        for key in ("p", "q"):
            if key in entry:
                assert torch.equal(entry[key], params1[name][key]), (name, key)
    assert not any(torch.equal(e["error"], params1[n]["error"]) for n, e in params0.items())


def test_mismatched_states_are_refused_with_a_reason(ranks: list[dict[str, Any]]) -> None:
    for messages in (r["refusals"] for r in ranks):
        assert "world_size=4" in messages[0]
        assert "rank=" in messages[1]
        assert "matrix_approximation_rank=4" in messages[2]
        assert "'extra.weight'" in messages[3]
        assert "comm.hook='none'" in messages[4]


def test_one_process_has_no_comm_state() -> None:
    comm = attach_comm_hook(deep_model(), POWERSGD)
    assert comm.state_dict() == {} and not comm.per_rank and comm.take().bytes_sent == 0
    comm.load_state_dict({})
    with pytest.raises(ValueError, match="comm.hook='powersgd'"):
        comm.load_state_dict({"hook": "powersgd", "iter": 3})
