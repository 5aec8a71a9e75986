"""The multigrid schedule (Wu et al., CVPR 2020) against PySlowFast's own output and its rules.

`shared/fixtures/multigrid_k400_schedule.csv` is the per-epoch schedule PySlowFast (HEAD
287ec00) produces for configs/Kinetics/SLOWFAST_8x8_R50_stepwise_multigrid.yaml; every column
of every row must come out the same. The shipped Charades and SSv2 multigrid configs (T=64,
B=16, other steps and epochs; SSv2 has a zero-length stage) are checked against values worked
out by hand from the rules in the module docstring, in the comments next to them.
"""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path

import pytest

from vidscale.schedules.multigrid import MultigridSchedule, multigrid_schedule
from vidscale.schedules.multigrid_shapes import bn_config
from vidscale.schedules.multigrid_spec import MultigridSpec
from vidscale.schedules.multigrid_table import COLUMNS, format_table, write_csv

FIXTURE = (
    Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "multigrid_k400_schedule.csv"
)

# configs/Kinetics/SLOWFAST_8x8_R50_stepwise_multigrid.yaml (SOLVER.LRS lists six; four are used).
K400 = MultigridSpec(
    frames=32,
    crop=224,
    global_batch=64,
    num_devices=8,
    sampling_rate=2,
    max_epoch=239,
    base_lr=0.1,
    steps=(0, 94, 154, 196),
    lrs=(1, 0.1, 0.01, 0.001),
    warmup_epochs=34.0,
    warmup_start_lr=0.01,
)
# configs/Charades/SLOWFAST_16x8_R50_multigrid.yaml and
# configs/SSv2/SLOWFAST_16x8_R50_multigrid.yaml
SHIPPED_LRS = (1, 0.1, 0.01, 0.001, 0.0001, 0.00001)
CHARADES = MultigridSpec(
    frames=64,
    crop=224,
    global_batch=16,
    num_devices=8,
    sampling_rate=2,
    max_epoch=57,
    base_lr=0.0375,
    steps=(0, 41, 49),
    lrs=SHIPPED_LRS,
    warmup_epochs=4.0,
    warmup_start_lr=0.0001,
    jitter_scales=(256, 340),
)
SSV2 = MultigridSpec(
    frames=64,
    crop=224,
    global_batch=16,
    num_devices=8,
    sampling_rate=2,
    max_epoch=22,
    base_lr=0.03,
    steps=(0, 14, 18),
    lrs=SHIPPED_LRS,
    warmup_epochs=0.19,
    warmup_start_lr=0.0001,
)


def fixture_rows() -> list[dict[str, str]]:
    lines = [line for line in FIXTURE.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def k400() -> MultigridSchedule:
    return multigrid_schedule(K400)


# ---------------------------------------------------------------------------------------------
# K400: PySlowFast's own per-epoch output


@pytest.mark.skipif(not FIXTURE.exists(), reason="shared fixture not present")
def test_k400_fixture_row_by_row() -> None:
    expected = fixture_rows()
    got = k400().rows()
    assert len(got) == len(expected) == 358
    for want, row in zip(expected, got, strict=True):
        assert list(row) == list(COLUMNS) == list(want)
        for column in COLUMNS:
            if column == "lr":
                assert row["lr"] == pytest.approx(float(want["lr"]), rel=1e-9), row["epoch"]
            else:
                assert str(row[column]) == want[column], (row["epoch"], column)


@pytest.mark.skipif(not FIXTURE.exists(), reason="shared fixture not present")
def test_k400_csv_is_the_fixture(tmp_path: Path) -> None:
    path = tmp_path / "schedule.csv"
    write_csv(k400().rows(), path)
    fixture = [line for line in FIXTURE.read_text().splitlines() if not line.startswith("#")]
    assert path.read_text().splitlines() == fixture


# The fixture's rows where anything but the LR changes (first epoch, T, S, global and per-GPU
# batch, BN, splits, max stride, short-cycle crops and per-GPU batches), and its checkpoint
# epochs: the same check without the shared file.
K400_STAGES = [
    (0, 8, 158, 512, 64, "sub_batchnorm", 8, 8, "112/158/158", "128/64/64"),
    (73, 16, 158, 256, 32, "sub_batchnorm", 4, 4, "112/158/158", "64/32/32"),
    (110, 16, 224, 128, 16, "sub_batchnorm", 2, 4, "112/158/224", "64/32/16"),
    (142, 32, 224, 64, 8, "batchnorm", 1, 2, "112/158/224", "32/16/8"),
    (158, 8, 158, 512, 64, "sub_batchnorm", 8, 8, "112/158/158", "128/64/64"),
    (205, 16, 158, 256, 32, "sub_batchnorm", 4, 4, "112/158/158", "64/32/32"),
    (228, 16, 224, 128, 16, "sub_batchnorm", 2, 4, "112/158/224", "64/32/16"),
    (248, 32, 224, 64, 8, "batchnorm", 1, 2, "112/158/224", "32/16/8"),
    (259, 8, 158, 512, 64, "sub_batchnorm", 8, 8, "112/158/158", "128/64/64"),
    (291, 16, 158, 256, 32, "sub_batchnorm", 4, 4, "112/158/158", "64/32/32"),
    (308, 16, 224, 128, 16, "sub_batchnorm", 2, 4, "112/158/224", "64/32/16"),
    (322, 32, 224, 64, 8, "batchnorm", 1, 2, "112/158/224", "32/16/8"),
]
K400_CHECKPOINTS = [
    22, 47, 72, 83, 96, 109, 119, 130, 141, 145, 151, 157, 172, 188, 204, 211, 219, 227, 233,
    240, 247, 250, 254, 258, 268, 279, 290, 295, 301, 307, 311, 316, 321, 322, 325, 328, 337,
    347, 357,
]  # fmt: skip


def test_k400_fixture_summary() -> None:
    schedule = k400()
    rows = schedule.rows()
    keys = COLUMNS[1:5] + COLUMNS[6:11]
    changes = [
        (row["epoch"], *(row[k] for k in keys))
        for i, row in enumerate(rows)
        if i == 0 or any(row[k] != rows[i - 1][k] for k in keys)
    ]
    assert changes == K400_STAGES
    assert [r["epoch"] for r in rows if r["ckpt_eval_preciseBN"]] == K400_CHECKPOINTS
    rebuild = [r["epoch"] for r in rows if r["rebuild_model_before_epoch"]]
    assert rebuild == [s[0] for s in K400_STAGES[1:]]


def test_k400_rewritten_steps_lrs_and_epochs() -> None:
    schedule = k400()
    # 239 x 1.5 = 358.5, and PySlowFast's float sum lands on exactly 358.5: round() -> 358.
    assert schedule.max_epoch == 358
    ends = (73, 110, 142, 158, 205, 228, 248, 259, 291, 308, 322, 329, 358)
    assert schedule.segment_ends == ends
    # SOLVER.STEPS = [0] + ends, the last replaced by (329 + 358) // 2 = 343.
    assert schedule.steps == (0, *ends[:-1], 343)
    # SOLVER.LRS = GAMMA**i x b per (LR stage, shape), b = 8, 4, 2, 1; the fine-tune repeats
    # the last one (0.01 x 1) for its first half, then 0.001 x 1.
    lrs = [0.1**i * b for i in range(3) for b in (8, 4, 2, 1)] + [0.01, 0.001]
    assert schedule.lrs == pytest.approx(lrs, rel=1e-12)


def test_k400_lr_at_fractional_epochs() -> None:
    schedule = k400()
    cases = {
        0: 0.01,
        17: 0.405,  # 0.01 + 17 x (0.8 - 0.01) / 34
        34: 0.8,  # 0.1 x 8 (the coarsest shape's batch factor)
        72.99: 0.8,
        73: 0.4,
        342.99: 0.001,
        343: 0.0001,
    }
    for epoch, lr in cases.items():
        assert schedule.lr_at(epoch) == pytest.approx(lr, rel=1e-12), epoch


def test_k400_savings() -> None:
    schedule = k400()
    assert round(schedule.iteration_saving(), 2) == 3.42
    assert round(schedule.flop_saving(), 2) == 3.43
    long_only = multigrid_schedule(replace(K400, short_cycle=False))
    assert round(long_only.iteration_saving(), 2) == 2.19
    short_only = multigrid_schedule(replace(K400, long_cycle=False))
    assert round(short_only.iteration_saving(), 2) == 1.56
    # Short only by hand: 358 epochs at a mean global batch of 64 x (4 + 2 + 1) / 3 against
    # 239 epochs at 64: 239 x 7 / (358 x 3).
    assert short_only.iteration_saving() == pytest.approx(239 * 7 / (358 * 3), rel=1e-12)


@pytest.mark.skipif(not FIXTURE.exists(), reason="shared fixture not present")
def test_k400_savings_from_the_fixture_alone() -> None:
    # The definitions, from PySlowFast's rows: a short cycle of 3 steps reads the sum of its 3
    # batches; a clip at crop c costs T x c^2 and the clips of an epoch split like the batches.
    iterations = flops = 0.0
    for row in fixture_rows():
        crops = [int(c) for c in row["short_cycle_crops"].split("/")]
        batches = [8 * int(b) for b in row["short_cycle_per_gpu_bs"].split("/")]
        iterations += len(batches) / sum(batches)
        t = int(row["T_fast"])
        flops += sum(b * t * c * c for b, c in zip(batches, crops, strict=True)) / sum(batches)
    schedule = k400()
    assert schedule.iteration_saving() == pytest.approx((239 / 64) / iterations, rel=1e-12)
    assert schedule.flop_saving() == pytest.approx(239 * 32 * 224**2 / flops, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# The rules on the other shipped configs, by hand


def rule_stage(spec: MultigridSpec, frames: int, crop: int) -> dict[str, object]:
    """A stage's sizes from the rules (not the code under test)."""
    t0, s0, g = spec.frames, spec.crop, spec.num_devices
    b = round(t0 * s0 * s0 / (frames * crop * crop))
    per_device = b * spec.global_batch // g
    small = [(round(f * s0), per_device * round((crop / (f * s0)) ** 2)) for f in (0.5, 0.5**0.5)]
    cycle = (*small, (crop, per_device))
    low, high = spec.jitter_scales
    return {
        "batch_factor": b,
        "global_batch": b * spec.global_batch,
        "per_device_batch": per_device,
        "short_cycle": cycle,
        "jitter_scales": tuple((round(low * c / s0), high) for c, _ in cycle),
        "max_sampling_rate": spec.sampling_rate * (t0 // frames),
    }


def check_stages(schedule: MultigridSchedule, expected: list[tuple[int, int, int, int, float]]):
    """expected: (first epoch, epochs, frames, crop, relative LR) per stage."""
    got = [(s.first_epoch, s.epochs, s.frames, s.crop) for s in schedule.stages]
    assert got == [e[:4] for e in expected]
    for stage, (*_, lr) in zip(schedule.stages, expected, strict=True):
        assert stage.lr_factor == pytest.approx(lr, rel=1e-12)
        rule = rule_stage(schedule.spec, stage.frames, stage.crop)
        assert {k: getattr(stage, k) for k in rule} == rule


def test_charades_by_hand() -> None:
    # T0 = 64 gives T = 16, 32, 32, 64 and S = 158, 158, 224, 224; per-shape b of the short
    # cycle (112, 158.4, S): 16/8/8, 8/4/4, 8/4/2, 4/2/1 -> avg_b 32/3, 16/3, 14/3, 7/3 (sum 23),
    # the same as K400. LR stages of 41 and 8 epochs split 32:16:14:7; saving r = 23/4, the
    # fine-tune (57 - 49) / r x 7/3 = 3.246 epochs; scale x = 57 x 1.5 / (49 + 3.246) = 1.6365.
    # Running ends x x: 31.12, 46.68, 60.29, 67.10, 73.17, 76.20, 78.86, 80.19, 85.5 (the float
    # sum is 85.50000000000001) -> 31, 47, 60, 67, 73, 76, 79, 80, 86.
    schedule = multigrid_schedule(CHARADES)
    assert schedule.segment_ends == (31, 47, 60, 67, 73, 76, 79, 80, 86)
    assert schedule.max_epoch == 86
    assert schedule.steps == (0, 31, 47, 60, 67, 73, 76, 79, 80, 83)  # (80 + 86) // 2 = 83
    lrs = [8, 4, 2, 1, 0.8, 0.4, 0.2, 0.1, 0.1, 0.01]
    assert schedule.lrs == pytest.approx(lrs, rel=1e-12)
    check_stages(
        schedule,
        [
            (0, 31, 16, 158, 8),
            (31, 16, 32, 158, 4),
            (47, 13, 32, 224, 2),
            (60, 7, 64, 224, 1),
            (67, 6, 16, 158, 0.8),
            (73, 3, 32, 158, 0.4),
            (76, 3, 32, 224, 0.2),
            (79, 1, 64, 224, 0.1),
            (80, 3, 64, 224, 0.1),  # fine-tune, first half: the LR before it
            (83, 3, 64, 224, 0.01),
        ],
    )
    # BN from the per-device batch vs 8: 16 -> 2 splits, 8 -> plain, 4 -> sync 2, 2 -> sync 4
    # (the config's own NUM_SYNC_DEVICES: 4 at the base shape).
    bn = [(s.per_device_batch, s.bn, s.bn_splits) for s in schedule.stages[:4]]
    assert bn == [
        (16, "sub_batchnorm", 2),
        (8, "batchnorm", 1),
        (4, "sync_batchnorm", 2),
        (2, "sync_batchnorm", 4),
    ]
    # Jitter (256, 340): lower bound x crop / 224 -> 128 at 112, round(180.57) = 181 at 158.
    assert schedule.stages[3].jitter_scales == ((128, 340), (181, 340), (256, 340))
    # Warmup 4 epochs from 1e-4 to 0.0375 x 8.
    assert schedule.lr_at(2.0) == pytest.approx(0.0001 + 2 * (0.3 - 0.0001) / 4, rel=1e-12)


def test_ssv2_zero_length_stage_by_hand() -> None:
    # LR stages of 14 and 4 epochs; fine-tune (22 - 18) / (23/4) x 7/3 = 1.623; scale
    # x = 33 / 19.623 = 1.6817. Running ends x x: 10.92, 16.38, 21.15, 23.54, 26.66, 28.22,
    # 29.59, 30.27, 33 -> 11, 16, 21, 24, 27, 28, 30, 30, 33: the base shape of the second LR
    # stage ends where the shape before it ends, so it never trains.
    schedule = multigrid_schedule(SSV2)
    assert schedule.segment_ends == (11, 16, 21, 24, 27, 28, 30, 30, 33)
    assert schedule.max_epoch == 33
    # PySlowFast keeps the zero-length stage in STEPS / LRS (30 twice); (30 + 33) // 2 = 31.
    assert schedule.steps == (0, 11, 16, 21, 24, 27, 28, 30, 30, 31)
    assert schedule.lrs == pytest.approx([8, 4, 2, 1, 0.8, 0.4, 0.2, 0.1, 0.1, 0.01], rel=1e-12)
    check_stages(
        schedule,
        [
            (0, 11, 16, 158, 8),
            (11, 5, 32, 158, 4),
            (16, 5, 32, 224, 2),
            (21, 3, 64, 224, 1),
            (24, 3, 16, 158, 0.8),
            (27, 1, 32, 158, 0.4),
            (28, 2, 32, 224, 0.2),
            (30, 1, 64, 224, 0.1),  # the fine-tune: no epoch of the zero-length stage
            (31, 2, 64, 224, 0.01),
        ],
    )
    # LR lookup skips the repeated step: epoch 30 -> LRS[8] = 0.1, epoch 31 -> 0.01.
    assert schedule.lr_at(29.5) == pytest.approx(0.03 * 0.2, rel=1e-12)
    assert schedule.lr_at(30) == pytest.approx(0.03 * 0.1, rel=1e-12)
    assert schedule.lr_at(31) == pytest.approx(0.03 * 0.01, rel=1e-12)
    # Checkpoints: in [a, z) every p = (z - a) // 3 + 1 epochs counted back from z - 1:
    # [0,11) p=4: 2, 6, 10; [11,16) p=2: 11, 13, 15; [16,21): 16, 18, 20; [21,24) p=2: 21, 23;
    # [24,27): 24, 26; [27,28) p=1: 27; [28,30) p=1: 28, 29; [30,30) none; [30,33) p=2: 30, 32.
    ckpt = [e for e in range(33) if schedule.is_checkpoint_epoch(e)]
    assert ckpt == [2, 6, 10, 11, 13, 15, 16, 18, 20, 21, 23, 24, 26, 27, 28, 29, 30, 32]
    rebuild = [e for e in range(33) if schedule.rebuild_before(e)]
    assert rebuild == [11, 16, 21, 24, 27, 28, 30]


# ---------------------------------------------------------------------------------------------
# Beyond PySlowFast: long only, short only, neither, one device, cosine


def test_long_cycle_only() -> None:
    # avg_b = b = 8, 4, 2, 1 (sum 15, saving 15/4); fine-tune 43 / 3.75 = 11.47 epochs; scale
    # 358.5 / 207.47 = 1.7280. First LR stage: 94 x 8/15 x 1.728 = 86.6 -> 87, then
    # (50.13 + 25.07) x 1.728 = 129.9 -> 130, 151.6 -> 152, 94 x 1.728 = 162.4 -> 162.
    schedule = multigrid_schedule(replace(K400, short_cycle=False))
    assert schedule.segment_ends[:4] == (87, 130, 152, 162)
    assert schedule.max_epoch == 358
    for stage in schedule.stages:
        assert stage.short_cycle == ((stage.crop, stage.per_device_batch),)
        assert stage.jitter_scales == ((round(256 * stage.crop / 224), 320),)
    shapes = [(8, 158, 8), (16, 158, 4), (16, 224, 2), (32, 224, 1)]
    got = [(s.frames, s.crop, s.batch_factor) for s in schedule.stages]
    assert got == shapes * 3 + [(32, 224, 1)] * 2  # the fine-tune at the base shape, two LRs
    lrs = [0.1**i * b for i in range(3) for _, _, b in shapes] + [0.01, 0.001]
    assert [s.lr_factor for s in schedule.stages] == pytest.approx(lrs, rel=1e-12)


def test_short_cycle_only() -> None:
    # PySlowFast init_multigrid without the long cycle: steps and max epoch x 1.5 (int()),
    # relative LRs unchanged, base shape throughout.
    schedule = multigrid_schedule(replace(K400, long_cycle=False))
    assert schedule.max_epoch == 358
    assert schedule.steps == (0, 141, 231, 294)
    assert schedule.lrs == pytest.approx([1, 0.1, 0.01, 0.001])
    for stage in schedule.stages:
        assert (stage.frames, stage.crop, stage.global_batch) == (32, 224, 64)
        assert stage.short_cycle == ((112, 32), (158, 16), (224, 8))
        assert stage.jitter_scales == ((128, 320), (181, 320), (256, 320))
        assert (stage.bn, stage.bn_splits, stage.max_sampling_rate) == ("batchnorm", 1, 2)
    assert schedule.lr_at(200) == pytest.approx(0.01)
    assert not any(schedule.rebuild_before(e) for e in range(358))


def test_neither_cycle_is_the_plain_schedule() -> None:
    schedule = multigrid_schedule(replace(K400, long_cycle=False, short_cycle=False))
    assert schedule.max_epoch == 239
    got = [(s.first_epoch, s.epochs, s.lr_factor) for s in schedule.stages]
    assert got == [(0, 94, 1), (94, 60, 0.1), (154, 42, 0.01), (196, 43, 0.001)]
    for stage in schedule.stages:
        assert stage.short_cycle == ((224, 8),)
        assert (stage.frames, stage.global_batch, stage.bn) == (32, 64, "batchnorm")
    # Warmup to the plain peak 0.1; the steps at 94, 154, 196.
    assert schedule.lr_at(17) == pytest.approx(0.01 + 17 * 0.09 / 34)
    assert schedule.lr_at(100) == pytest.approx(0.01)
    assert schedule.iteration_saving() == schedule.flop_saving() == 1.0
    # The eval_freq rule per LR stage: [0, 94) every 94 // 3 + 1 = 32 epochs back from 93.
    assert [e for e in range(94) if schedule.is_checkpoint_epoch(e)] == [29, 61, 93]


def test_one_device() -> None:
    schedule = multigrid_schedule(replace(K400, num_devices=1))
    assert schedule.segment_ends == k400().segment_ends
    for stage in schedule.stages:
        assert stage.per_device_batch == stage.global_batch == 64 * stage.batch_factor
        rule = rule_stage(schedule.spec, stage.frames, stage.crop)
        assert stage.short_cycle == rule["short_cycle"]
    first = schedule.stages[0]
    assert first.short_cycle == ((112, 1024), (158, 512), (158, 512))
    assert (first.bn, first.bn_splits) == ("sub_batchnorm", 64)  # 512 clips / 8 per BN group
    assert round(schedule.iteration_saving(), 2) == 3.42


def test_one_device_cannot_sync() -> None:
    # 4 clips on the only device: PySlowFast would ask for sync BN over 2 devices.
    spec = replace(K400, global_batch=4, num_devices=1)
    base = multigrid_schedule(spec).stages[3]
    assert (base.batch_factor, base.per_device_batch, base.bn) == (1, 4, "batchnorm")


def test_cosine_with_long_cycle() -> None:
    spec = replace(K400, lr_policy="cosine", lrs=())
    schedule = multigrid_schedule(spec)
    assert schedule.segment_ends == k400().segment_ends  # the LR policy does not move shapes
    assert schedule.max_epoch == 358

    def cosine(e: float) -> float:
        return 0.1 * 0.5 * (1 + math.cos(math.pi * e / 358))

    for stage in schedule.stages:
        assert stage.lr_factor == stage.batch_factor
        for e in (stage.first_epoch, stage.first_epoch + stage.epochs / 2, stage.end_epoch - 1e-6):
            if e >= 34:
                assert schedule.lr_at(e) == pytest.approx(stage.batch_factor * cosine(e))
        # Continuous inside a stage.
        mid = stage.first_epoch + stage.epochs / 2
        if mid >= 34:
            assert schedule.lr_at(mid + 1e-6) == pytest.approx(schedule.lr_at(mid), rel=1e-5)
    # At a shape change the LR follows the batch: 8 -> 4 at epoch 73.
    assert schedule.lr_at(73) / schedule.lr_at(73 - 1e-9) == pytest.approx(0.5, rel=1e-6)
    # Warmup: a line from 0.01 to 8 x cosine(34).
    assert schedule.lr_at(0) == pytest.approx(0.01)
    assert schedule.lr_at(17) == pytest.approx((0.01 + 8 * cosine(34)) / 2)
    assert schedule.lr_at(358) == pytest.approx(0.0, abs=1e-12)


def test_cosine_without_steps_is_one_long_cycle() -> None:
    spec = replace(K400, lr_policy="cosine", steps=(), lrs=())
    schedule = multigrid_schedule(spec)
    # avg_b 32/3 : 16/3 : 14/3 : 7/3 of round(239 x 1.5) epochs, no separate fine-tune.
    assert [(s.frames, s.crop) for s in schedule.stages] == [
        (8, 158),
        (16, 158),
        (16, 224),
        (32, 224),
    ]
    assert schedule.max_epoch == 358
    assert schedule.stages[0].epochs == round(358.5 * 32 / 69)


def test_constant_lr_with_long_cycle() -> None:
    spec = replace(K400, steps=(0,), lrs=(1.0,), warmup_epochs=0.0)
    schedule = multigrid_schedule(spec)
    assert [s.lr_factor for s in schedule.stages] == [8, 4, 2, 1]
    assert schedule.lr_at(0) == pytest.approx(0.8)
    assert schedule.lr_at(schedule.max_epoch) == pytest.approx(0.1)


# ---------------------------------------------------------------------------------------------
# Pieces and contracts


def test_bn_config() -> None:
    assert bn_config(64, 8, 8) == ("sub_batchnorm", 8)
    assert bn_config(8, 8, 8) == ("batchnorm", 1)
    assert bn_config(2, 8, 8) == ("sync_batchnorm", 4)
    assert bn_config(12, 8, 8) == ("batchnorm", 1)  # PySlowFast: sub-BN with 1 split
    assert bn_config(28, 8, 8) == ("sub_batchnorm", 2)  # int(3.5) = 3 does not divide 28
    assert bn_config(1, 8, 6) == ("sync_batchnorm", 6)  # 8 wanted; groups must tile 6 devices
    assert bn_config(2, 8, 1) == ("batchnorm", 1)


def test_stage_at_and_bounds() -> None:
    schedule = k400()
    assert schedule.stage_at(0) is schedule.stages[0]
    assert schedule.stage_at(357) is schedule.stages[-1]
    assert schedule.is_checkpoint_epoch(357)
    with pytest.raises(ValueError, match="epoch"):
        schedule.stage_at(358)
    with pytest.raises(ValueError, match="epoch_exact"):
        schedule.lr_at(-0.5)
    epochs = [s.epochs for s in schedule.stages]
    assert all(e > 0 for e in epochs) and sum(epochs) == 358


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"steps": (1, 94)}, "steps"),
        ({"steps": (0, 94.5)}, "steps"),
        ({"steps": (0, 300)}, "steps"),
        ({"global_batch": 60}, "global_batch"),
        ({"lrs": (1, 0.1)}, "lrs"),
        ({"cosine_end_lr": 0.2}, "cosine_end_lr"),
        ({"long_cycle_factors": ()}, "long_cycle_factors"),
        ({"long_cycle_sampling_rate": 1}, "long_cycle_sampling_rate"),
        ({"jitter_scales": (320, 256)}, "jitter_scales"),
    ],
)
def test_validation(change: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        replace(K400, **change)  # type: ignore[arg-type]


def test_steps_policy_needs_steps() -> None:
    with pytest.raises(ValueError, match="steps"):
        replace(K400, steps=())


def test_format_table() -> None:
    rows = k400().rows()[:2]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == list(COLUMNS)
    assert lines[2].split()[:6] == ["1", "8", "158", "512", "64", "0.03323529412"]
