"""The LR rule of a fault-tolerant run (`train.ft.replica.scaled_lr`): with every group live it
is the trainer's schedule step for step; with fewer, the same curve at the step's samples."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vidscale.distributed.ft.position import DataPosition
from vidscale.distributed.ft.settings import FTSettings
from vidscale.errors import InputError
from vidscale.recipes import get_recipe
from vidscale.schedules.lr import lr_at
from vidscale.train.ft.replica import build_replica, scaled_lr

SIZE, BATCH, EPOCHS = 96, 8, 5  # 12 steps an epoch at full strength


@pytest.mark.parametrize(
    "lr",
    [
        {"schedule": "cosine", "warmup_epochs": 1.0},
        {"schedule": "poly", "warmup_epochs": 0.5, "final_lr": 1e-4},
        {"schedule": "step", "warmup_epochs": 2.0, "milestones": (3, 4)},
    ],
)
def test_at_full_strength_it_is_the_trainers_schedule(lr: dict) -> None:
    cfg = get_recipe("demo_tsm_r18_8f_b32_e12")
    cfg = replace(cfg, lr=replace(cfg.lr, **lr), train=replace(cfg.train, epochs=EPOCHS))
    steps_per_epoch = SIZE // BATCH
    peak = cfg.optim.lr_per_8_clips * BATCH / 8
    for step in range(EPOCHS * steps_per_epoch):
        position = DataPosition(SIZE, 0, epoch=step // steps_per_epoch)
        position.consumed = step % steps_per_epoch * BATCH
        trainer = lr_at(
            step,
            base_lr=peak,
            total_steps=EPOCHS * steps_per_epoch,
            warmup_steps=round(cfg.lr.warmup_epochs * steps_per_epoch),
            cfg=cfg.lr,
            steps_per_epoch=steps_per_epoch,
        )
        assert scaled_lr(cfg, position, BATCH) == pytest.approx(trainer, rel=1e-12), step


def test_a_group_away_halves_the_step_and_its_rate_not_the_schedule() -> None:
    cfg = get_recipe("demo_tsm_r18_8f_b32_e12")
    position = DataPosition(SIZE, 0, epoch=1, consumed=40)
    full, half = scaled_lr(cfg, position, BATCH), scaled_lr(cfg, position, BATCH // 2)
    assert half == pytest.approx(full / 2, rel=1e-12)
    # Warmup counts clips: 40 clips into a 96-clip warmup epoch 0 is still warming up.
    early = DataPosition(SIZE, 0, epoch=0, consumed=40)
    start = cfg.lr.warmup_start_factor
    peak = cfg.optim.lr_per_8_clips * BATCH / 8
    assert scaled_lr(cfg, early, BATCH) == pytest.approx(
        peak * (start + (1 - start) * 40 / SIZE), rel=1e-12
    )


def test_milestones_in_steps_are_refused_in_one_line(tmp_path: Path) -> None:
    cfg = get_recipe("demo_tsm_r18_8f_b32_e12")
    cfg = replace(cfg, lr=replace(cfg.lr, schedule="step", milestones=(5,), milestone_unit="step"))
    settings = FTSettings(lighthouse="127.0.0.1:1", group=0, groups=2)
    with pytest.raises(InputError, match="^lr.milestone_unit: "):
        build_replica(cfg, settings, tmp_path)
