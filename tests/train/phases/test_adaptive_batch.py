"""The adaptive batch rule (Cong et al. Alg. 1 lines 13-21) and the run sizes it leads to."""

from __future__ import annotations

import pytest

from vidscale.config import RunConfig, apply_overrides
from vidscale.recipes import get_recipe
from vidscale.run.timeline import run_sizes, schedule_position
from vidscale.train.phases.adaptive_batch import (
    AdaptiveBatch,
    largest_divisor_at_most,
    sizes_for_batch,
)


def cfg(*extra: str) -> RunConfig:
    return apply_overrides(
        get_recipe("demo_tsm_r18_8f_b32_e12"), ["aavg.adaptive_batch=true", *extra]
    )


def test_the_batch_grows_when_accuracy_falls_below_the_best_times_b1() -> None:
    rule = AdaptiveBatch.from_config(cfg("aavg.max_batch=40"), world_size=2, global_batch=32)
    assert rule.learners == 2 and rule.global_batch == 32  # simulate_world_size=2: 2 x 16
    grew = [rule.observe(a, epochs_done=e) for e, a in enumerate([10.0, 30.0, 20.0, 25.0, 5.0], 1)]
    # a* = 0, 10, 30, 30, 30: 20 < 30 doubles 16 -> 32 per learner; 25 < 30 would double
    # again but the cap is 40; at the cap, 5 < 30 changes nothing.
    assert grew == [False, False, True, True, False]
    assert rule.history == [(0, 32), (3, 64), (4, 80)]
    assert rule.best == 30.0
    assert not rule.observe(1.0, epochs_done=6)  # at the cap: no growth
    state = rule.state_dict()
    again = AdaptiveBatch.from_config(cfg(), world_size=2, global_batch=32)
    again.load_state_dict(state)
    assert again.history == rule.history and again.best == rule.best


def test_b1_sets_the_margin_and_eval_every_the_checks() -> None:
    rule = AdaptiveBatch.from_config(
        cfg("aavg.b1=1.1", "aavg.eval_every=2"), world_size=2, global_batch=32
    )
    assert [rule.due(epochs_done=e) for e in (1, 2, 3, 4)] == [False, True, False, True]
    rule.observe(50.0, epochs_done=2)
    assert rule.observe(54.0, epochs_done=4)  # 54 < 50 x 1.1: not enough improvement
    off = AdaptiveBatch.from_config(cfg("aavg.adaptive_batch=false"), world_size=2, global_batch=32)
    assert not off.due(epochs_done=1)


def test_sizes_for_a_grown_batch_keep_the_learner_batch_per_micro_batch() -> None:
    c = cfg()
    start = run_sizes(c, world_size=1, train_size=768)  # 1 process standing for 2 learners
    assert (start.micro_batch, start.accumulate, start.steps_per_epoch) == (16, 2, 24)
    grown = sizes_for_batch(c, start, global_batch=64)
    assert (grown.micro_batch, grown.accumulate, grown.steps_per_epoch) == (32, 2, 12)
    assert grown.base_lr == start.base_lr  # lr_rule unchanged (Adam)
    linear = sizes_for_batch(cfg("aavg.lr_rule=linear"), start, global_batch=64)
    assert linear.base_lr == pytest.approx(2 * start.base_lr)
    capped = sizes_for_batch(cfg("aavg.max_micro_batch=24"), start, global_batch=64)
    assert (capped.micro_batch, capped.accumulate) == (16, 4)  # largest divisor of 64 <= 24
    assert sizes_for_batch(c, start, global_batch=32) is start


def test_the_schedule_continues_over_epochs_when_steps_per_epoch_change() -> None:
    c = cfg()
    start = run_sizes(c, world_size=2, train_size=768)
    grown = sizes_for_batch(c, start, global_batch=64)
    # Epoch 3 starts at the same point of the schedule under either size.
    assert schedule_position(start, epoch=3, step_in_epoch=0) / start.steps_per_epoch == 3
    assert schedule_position(grown, epoch=3, step_in_epoch=0) / grown.steps_per_epoch == 3
    assert schedule_position(start, epoch=2, step_in_epoch=5) == 2 * 24 + 5


def test_largest_divisor() -> None:
    assert [largest_divisor_at_most(n, 8) for n in (16, 12, 7, 9)] == [8, 6, 7, 3]
