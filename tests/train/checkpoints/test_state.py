"""The checkpointed-state registry (`train.checkpoints.state`): every registered part of a run round-trips,
a plan change restores only what does not describe the plan, a missing or unfitting entry is
named, and a checkpoint holds exactly the registered parts besides the run's record."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.train.checkpoints.test_checkpointer import checkpointer, run_state, train_a_step
from vidscale.distributed.env import init_distributed
from vidscale.run.checkpoint import load_checkpoint, upgrade
from vidscale.train.checkpoints.checkpointer import RunState
from vidscale.train.checkpoints.state import Held, PartLoadError, StateRegistry

SPLITS = 2  # sub-batch BN groups, so that the BN splits part holds something


def _enter_split_batchnorm(parts: RunState) -> None:
    # A phase with sub-batch BN entered, as a multigrid run's phase switch does at start.
    parts.phase_switch._set_batchnorm(splits=SPLITS, sync=1)


def _train_split_statistics(parts: RunState) -> None:
    parts.model.train()
    parts.model(torch.randn(4, 3, 2, 4, 4))  # two groups of two clips update their statistics


# One way to move each registered part away from a fresh run's state. A part registered without
# an entry here fails `test_every_registered_part_round_trips`.
CHANGES: dict[str, Callable[[RunState], None]] = {
    "model": lambda p: train_a_step(p),
    "optimizer": lambda p: train_a_step(p),
    "progress": lambda p: p.progress.load_state_dict({"epoch": 2, "step": 7, "step_in_epoch": 1}),
    "epoch_totals": lambda p: p.run_log.totals.add(
        loss=1.5, hits=3, clips=8, finite=True, wait=0.25, seconds=1.0
    ),
    "rank_counters": lambda p: setattr(p.run_log.counters, "steps", 11),
    "divergence_guard": lambda p: setattr(p.guard, "consecutive", 2),
    "adaptive_batch": lambda p: p.adaptive.load_state_dict(
        {"best": 0.5, "history": [[0, 8], [3, 16]]}
    ),
    "batchnorm_splits": _train_split_statistics,
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_every_registered_part_round_trips() -> None:
    env = init_distributed("cpu")
    keys = list(run_state(env, seed=0).registry())
    assert set(keys) == set(CHANGES), "a registered part needs a change in CHANGES"
    for key in keys:
        saved_parts, fresh_parts = run_state(env, seed=0), run_state(env, seed=0)
        for parts in (saved_parts, fresh_parts):
            _enter_split_batchnorm(parts)
        CHANGES[key](saved_parts)
        saved, fresh = saved_parts.registry(), fresh_parts.registry()
        assert not _same(saved[key].state_dict(), fresh[key].state_dict()), key
        restored = fresh.load_state_dict(saved.state_dict(), exact=True)
        assert restored == keys
        for other in keys:
            assert _same(fresh[other].state_dict(), saved[other].state_dict()), (key, other)


def test_a_carried_over_plan_restores_only_the_parts_that_do_not_describe_it() -> None:
    env = init_distributed("cpu")
    saved_parts, fresh_parts = run_state(env, seed=0), run_state(env, seed=0)
    for change in CHANGES.values():
        change(saved_parts)
    restored = fresh_parts.registry().load_state_dict(
        saved_parts.registry().state_dict(), exact=False
    )
    assert restored == ["model", "optimizer", "rank_counters", "batchnorm_splits"]
    assert fresh_parts.progress.step == 0 and fresh_parts.guard.consecutive == 0
    assert fresh_parts.run_log.totals.steps == 0 and fresh_parts.adaptive.best == 0.0
    assert fresh_parts.run_log.counters.steps == saved_parts.run_log.counters.steps


def test_an_optional_part_may_be_absent_and_a_required_one_is_named() -> None:
    state = {"a": {"x": 1}}
    registry = StateRegistry()
    box: dict[str, Any] = {}
    registry.register("a", Held(lambda: box, box.update))
    registry.register("later", Held(lambda: {}, box.update), optional=True)
    assert registry.load_state_dict(state, exact=True) == ["a"] and box == {"x": 1}
    registry.register("needed", Held(lambda: {}, box.update))
    with pytest.raises(PartLoadError, match="needed: 'missing from the checkpoint'"):
        registry.load_state_dict(state, exact=True)
    with pytest.raises(KeyError, match="registered twice"):
        registry.register("a", Held(lambda: {}, box.update))
    with pytest.raises(TypeError, match="has no state_dict"):
        registry.register("b", object())  # type: ignore[arg-type]


def test_a_checkpoint_holds_the_registered_parts_and_the_record(tmp_path: Path) -> None:
    parts = run_state(init_distributed("cpu"), seed=0)
    saver = checkpointer(tmp_path, parts)
    saver.save(epoch_end=False)
    written = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert set(written) == set(parts.registry()) | set(saver.record.state())


def test_a_checkpoint_of_the_earlier_layout_loads_its_bad_step_count() -> None:
    earlier = {"progress": {"epoch": 0, "step": 4, "step_in_epoch": 4}, "bad_steps_in_a_row": 2}
    assert upgrade(earlier) == {
        "progress": {"epoch": 0, "step": 4, "step_in_epoch": 4},
        "divergence_guard": {"bad_steps_in_a_row": 2},
    }
