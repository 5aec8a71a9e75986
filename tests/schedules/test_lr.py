"""The LR schedule against the design brief's §6 golden table, plus warmup, step and validation."""

from __future__ import annotations

import dataclasses
import math

import pytest

from vidscale.schedules.lr import LRConfig, lr_at, lr_table, scaled_lr

# The design brief's §6: base 0.1 per 8 clips, global batch 64 (x8) -> peak 0.8; 5 warmup steps from 0.1
# (warmup_start_factor 1/8) to 0.8; cosine over the 15 steps after warmup (total_steps = 20).
# Steps 0-11 are the DESIGN values; steps 12-20 complete the table. A check independent of the
# code: a half cosine is point-symmetric, so lr(5 + k) + lr(20 - k) = 0.8 (e.g. 0.791259 + 0.008741).
GOLDEN = [
    0.1, 0.24, 0.38, 0.52, 0.66, 0.8,
    0.791259, 0.765418, 0.723607, 0.667652, 0.6, 0.523607,
    0.441811, 0.358189, 0.276393, 0.2, 0.132348, 0.076393, 0.034582, 0.008741, 0.0,
]  # fmt: skip
DESIGN = LRConfig(schedule="cosine", warmup_epochs=5.0, warmup_start_factor=0.125)


def design_lr(step: float) -> float:
    return lr_at(step, base_lr=scaled_lr(0.1, 64), total_steps=20, warmup_steps=5, cfg=DESIGN)


def test_design_golden_table() -> None:
    assert scaled_lr(0.1, 64) == pytest.approx(0.8, abs=1e-15)
    got = [design_lr(s) for s in range(21)]
    assert got == pytest.approx(GOLDEN, abs=1e-6)
    # Beyond the table's 6 decimals: the closed forms of the warmup line and the half cosine.
    exact = [0.1 + 0.14 * s for s in range(5)]
    exact += [0.4 * (1 + math.cos(math.pi * k / 15)) for k in range(16)]
    assert got == pytest.approx(exact, abs=1e-12)


def test_golden_table_is_point_symmetric() -> None:
    for k in range(16):
        assert GOLDEN[5 + k] + GOLDEN[20 - k] == pytest.approx(0.8, abs=2e-6)


def test_tsm_linear_scaling() -> None:
    # TSM §4: 0.00125 per 8 clips; k GPUs x 8 clips -> 0.00125 k.
    assert scaled_lr(0.00125, 8) == pytest.approx(0.00125)
    assert scaled_lr(0.00125, 8 * 128) == pytest.approx(0.00125 * 128)
    with pytest.raises(ValueError, match="global_batch"):
        scaled_lr(0.1, 0)


def test_warmup_is_linear_and_continuous() -> None:
    assert design_lr(2.5) == pytest.approx((design_lr(2) + design_lr(3)) / 2, abs=1e-12)
    assert design_lr(5 - 1e-9) == pytest.approx(design_lr(5), abs=1e-8)
    zero_start = dataclasses.replace(DESIGN, warmup_start_factor=0.0)
    assert lr_at(0, base_lr=1.0, total_steps=10, warmup_steps=4, cfg=zero_start) == 0.0
    assert lr_at(1, base_lr=1.0, total_steps=10, warmup_steps=4, cfg=zero_start) == 0.25


def test_no_warmup_starts_at_peak_and_final_lr_is_the_floor() -> None:
    cfg = dataclasses.replace(DESIGN, final_lr=0.1)
    assert lr_at(0, base_lr=0.8, total_steps=10, warmup_steps=0, cfg=cfg) == pytest.approx(0.8)
    assert lr_at(5, base_lr=0.8, total_steps=10, warmup_steps=0, cfg=cfg) == pytest.approx(0.45)
    assert lr_at(10, base_lr=0.8, total_steps=10, warmup_steps=0, cfg=cfg) == pytest.approx(0.1)
    assert lr_at(99, base_lr=0.8, total_steps=10, warmup_steps=0, cfg=cfg) == pytest.approx(0.1)


def test_step_schedule_in_epochs_and_steps() -> None:
    by_epoch = LRConfig(schedule="step", warmup_epochs=1, milestones=(2, 4), gamma=0.1)
    lrs = [
        lr_at(s, base_lr=1.0, total_steps=60, warmup_steps=10, cfg=by_epoch, steps_per_epoch=10)
        for s in (0, 5, 10, 19, 20, 39, 40, 59)
    ]
    assert lrs == pytest.approx([0.125, 0.5625, 1.0, 1.0, 0.1, 0.1, 0.01, 0.01])
    by_step = dataclasses.replace(by_epoch, milestone_unit="step", milestones=(15,))
    assert lr_at(14, base_lr=1.0, total_steps=60, warmup_steps=10, cfg=by_step) == 1.0
    assert lr_at(15, base_lr=1.0, total_steps=60, warmup_steps=10, cfg=by_step) == 0.1
    with pytest.raises(ValueError, match="steps_per_epoch"):
        lr_at(20, base_lr=1.0, total_steps=60, warmup_steps=10, cfg=by_epoch)


def test_warmup_longer_than_the_run_stays_on_the_warmup_line() -> None:
    # e.g. a 2-epoch trial of a recipe with 5 warmup epochs: never reaches the peak, never fails.
    lrs = [lr_at(s, base_lr=0.8, total_steps=4, warmup_steps=7, cfg=DESIGN) for s in range(4)]
    assert lrs == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_constant_schedule() -> None:
    cfg = LRConfig(schedule="constant")
    assert [
        lr_at(s, base_lr=0.4, total_steps=8, warmup_steps=2, cfg=cfg) for s in (0, 1, 2, 7)
    ] == (pytest.approx([0.05, 0.225, 0.4, 0.4]))


def test_lr_table_lists_every_nth_step_and_the_last() -> None:
    table = lr_table(DESIGN, base_lr=0.8, total_steps=20, warmup_steps=5, every=6)
    assert [s for s, _ in table] == [0, 6, 12, 18, 19]
    assert [lr for _, lr in table] == pytest.approx(
        [GOLDEN[s] for s in (0, 6, 12, 18, 19)], abs=1e-6
    )


def test_bad_step_counts_are_rejected() -> None:
    with pytest.raises(ValueError, match="warmup_steps"):
        lr_at(0, base_lr=1.0, total_steps=5, warmup_steps=-1, cfg=DESIGN)
    with pytest.raises(ValueError, match="total_steps"):
        lr_table(DESIGN, base_lr=1.0, total_steps=0, warmup_steps=0)
    with pytest.raises(ValueError, match="step"):
        lr_at(-1, base_lr=1.0, total_steps=5, warmup_steps=0, cfg=DESIGN)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schedule": "linear"}, "schedule"),
        ({"warmup_epochs": -1.0}, "warmup_epochs"),
        ({"warmup_start_factor": 1.5}, "warmup_start_factor"),
        ({"milestones": (4, 2)}, "milestones"),
        ({"milestone_unit": "iter"}, "milestone_unit"),
        ({"gamma": 0.0}, "gamma"),
        ({"final_lr": -0.1}, "final_lr"),
    ],
)
def test_validate_names_the_field(change: dict[str, object], field: str) -> None:
    LRConfig().validate()
    cfg = dataclasses.replace(LRConfig(), **change)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"^{field} "):
        cfg.validate()
