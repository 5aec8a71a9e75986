"""The polynomial ("poly") LR decay: a golden table, its join with warmup, power 1, validation."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from vidscale.config import ConfigError, RunConfig
from vidscale.schedules.lr import LRConfig, lr_at, lr_table
from vidscale.schedules.multigrid_config import MultigridConfig
from vidscale.train.timeline import multigrid_spec, run_sizes

POLY = LRConfig(schedule="poly", warmup_epochs=2, warmup_start_factor=0.0, power=2.0)

# Peak 1.0, 2 warmup steps from 0, then (1 - t/8)^2 over the 8 steps after warmup (T = 10),
# written out by hand: t = 0..8 gives (8 - t)^2 / 64 = 64, 49, 36, 25, 16, 9, 4, 1, 0 over 64.
GOLDEN = [
    0.0, 0.5,
    1.0, 0.765625, 0.5625, 0.390625, 0.25, 0.140625, 0.0625, 0.015625,
    0.0,
]  # fmt: skip


def poly_lr(step: float, cfg: LRConfig = POLY, *, peak: float = 1.0) -> float:
    return lr_at(step, base_lr=peak, total_steps=10, warmup_steps=2, cfg=cfg)


def test_golden_table() -> None:
    got = [poly_lr(s) for s in range(11)]
    assert got == pytest.approx(GOLDEN, abs=1e-15)


def test_last_step_trains_and_the_end_of_the_run_is_zero() -> None:
    # The last optimizer step (s = T - 1) runs at P / (T - W)^2; the rate is 0 at s = T and after.
    assert poly_lr(9, peak=3.0) == pytest.approx(3.0 / 8**2)
    assert poly_lr(10, peak=3.0) == 0.0
    assert poly_lr(25, peak=3.0) == 0.0


def test_continuous_at_the_warmup_boundary() -> None:
    for start in (0.0, 0.125, 1.0):
        cfg = dataclasses.replace(POLY, warmup_start_factor=start)
        below = poly_lr(2 - 1e-9, cfg, peak=2.5)
        assert below == pytest.approx(poly_lr(2, cfg, peak=2.5), abs=1e-8)
        assert poly_lr(2, cfg, peak=2.5) == 2.5
    # The decay starts from the peak with zero slope for power 2 (the derivative is -2P/(T-W)).
    assert poly_lr(2.001) == pytest.approx(1.0 - 2 * 0.001 / 8, abs=1e-6)


def test_power_one_is_linear_decay() -> None:
    linear = dataclasses.replace(POLY, power=1.0)
    got = [poly_lr(s, linear, peak=0.8) for s in range(2, 11)]
    assert got == pytest.approx([0.8 * (8 - t) / 8 for t in range(9)], abs=1e-15)
    # Equal steps, equal drops: a straight line.
    drops = {round(a - b, 12) for a, b in itertools.pairwise(got)}
    assert drops == {0.1}


def test_final_lr_is_the_floor_and_power_shapes_the_curve() -> None:
    floored = dataclasses.replace(POLY, final_lr=0.1)
    assert poly_lr(6, floored) == pytest.approx(0.1 + 0.9 * 0.25)
    assert poly_lr(10, floored) == pytest.approx(0.1)
    # A larger power falls faster: at mid-decay (1/2)^p.
    for power in (0.5, 1.0, 2.0, 3.0):
        cfg = dataclasses.replace(POLY, power=power)
        assert poly_lr(6, cfg) == pytest.approx(0.5**power)


def test_no_warmup_starts_at_the_peak() -> None:
    cfg = dataclasses.replace(POLY, warmup_epochs=0)
    got = [lr_at(s, base_lr=2.0, total_steps=4, warmup_steps=0, cfg=cfg) for s in range(5)]
    assert got == pytest.approx([2.0, 1.125, 0.5, 0.125, 0.0])


def test_lr_table_prints_poly() -> None:
    table = lr_table(POLY, base_lr=1.0, total_steps=10, warmup_steps=2, every=3)
    assert [s for s, _ in table] == [0, 3, 6, 9]
    assert [lr for _, lr in table] == pytest.approx([GOLDEN[s] for s in (0, 3, 6, 9)])


@pytest.mark.parametrize("power", [0.0, -1.0, float("inf"), float("nan")])
def test_power_must_be_positive(power: float) -> None:
    POLY.validate()
    with pytest.raises(ValueError, match="^power "):
        dataclasses.replace(POLY, power=power).validate()


def test_multigrid_refuses_poly_instead_of_running_a_constant_rate() -> None:
    cfg = RunConfig(lr=POLY, multigrid=MultigridConfig(long_cycle=True))
    plan = run_sizes(cfg, world_size=1, train_size=10_000)
    with pytest.raises(ConfigError, match="polynomial"):
        multigrid_spec(cfg, plan)
