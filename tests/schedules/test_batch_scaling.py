"""Peak LR per optimizer as a function of the global batch (the batch-size study's rules)."""

from __future__ import annotations

import math

import pytest

from vidscale.schedules.batch_scaling import (
    BASE_BATCH,
    SQRT_BASE_LR,
    batch_scaled_lr,
    rule_text,
    sqrt_scaled_lr,
)
from vidscale.schedules.lr import scaled_lr

DEMO_LR_PER_8 = 0.0125  # demo_tsm_r18_8f_b32_e12


def test_sgd_keeps_the_recipe_linear_scaling() -> None:
    peaks = [
        batch_scaled_lr("sgd", b, recipe_lr_per_8_clips=DEMO_LR_PER_8).peak_lr
        for b in (32, 128, 768)
    ]
    assert peaks == pytest.approx([0.05, 0.2, 1.2])


def test_sqrt_scaling_golden_values() -> None:
    assert sqrt_scaled_lr(BASE_BATCH, base_lr=0.3) == pytest.approx(0.3)
    assert sqrt_scaled_lr(128, base_lr=0.3) == pytest.approx(0.6)  # 4x batch -> 2x rate
    assert sqrt_scaled_lr(768, base_lr=1.0) == pytest.approx(4.898979485566356)
    assert sqrt_scaled_lr(50, base_lr=1.0, base_batch=2) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="batches"):
        sqrt_scaled_lr(0, base_lr=1.0)


@pytest.mark.parametrize("optimizer", ["lars", "lamb"])
def test_lars_and_lamb_scale_by_square_root_from_their_base(optimizer: str) -> None:
    base = SQRT_BASE_LR[optimizer]
    rule = batch_scaled_lr(optimizer, 768, recipe_lr_per_8_clips=DEMO_LR_PER_8)
    assert rule.peak_lr == pytest.approx(base * math.sqrt(768 / 32))
    small = batch_scaled_lr(optimizer, 32, recipe_lr_per_8_clips=DEMO_LR_PER_8)
    assert small.peak_lr == pytest.approx(base)
    assert rule.rule == f"square root: lr = {base:g} x sqrt(B / 32)"


def test_the_calibrated_base_rates() -> None:
    # Set by the 3-epoch runs listed in the module docstring; change both together.
    assert SQRT_BASE_LR == {"lars": 8.0, "lamb": 0.05} and BASE_BATCH == 32


@pytest.mark.parametrize("optimizer", ["sgd", "lars", "lamb"])
@pytest.mark.parametrize("batch", [32, 128, 768])
def test_rule_round_trips_through_the_loop_scaling(optimizer: str, batch: int) -> None:
    rule = batch_scaled_lr(optimizer, batch, recipe_lr_per_8_clips=DEMO_LR_PER_8)
    # The loop multiplies lr_per_8_clips by B / 8: it must land on the rule's peak.
    assert scaled_lr(rule.lr_per_8_clips, batch) == pytest.approx(rule.peak_lr)
    assert rule.optimizer == optimizer and rule.global_batch == batch


def test_unknown_optimizer_is_refused() -> None:
    assert rule_text("sgd", recipe_lr_per_8_clips=0.0125) == "linear: lr = 0.0125 x B / 8"
    with pytest.raises(ValueError, match="optimizer"):
        batch_scaled_lr("adamw", 32, recipe_lr_per_8_clips=DEMO_LR_PER_8)
