"""The ImageNet and image-demo recipes resolve to their papers' batch, peak LR and steps."""

import math

import pytest

from vidscale.cli import main
from vidscale.config import apply_overrides
from vidscale.recipes import get_recipe
from vidscale.run.timeline import recipe_row, run_sizes, step_lr
from vidscale.schedules.batch_scaling import batch_scaled_lr

IMAGENET = 1_281_167  # ILSVRC-2012 training images

# (recipe, devices, per device, global batch, peak LR, steps/epoch, warmup steps, epochs), by hand:
# 1,281,167 // 256 = 5004, // 8192 = 156, // 32768 = 39; Goyal: 0.1 x B / 256; LARS: sqrt(B / 32)
# = sqrt(1024) = 32 with 10 x B / 32768 = 10 warmup epochs; Goyal's warmup is 5 epochs.
EXPECTED = [
    ("resnet50_imagenet_b256_e90_sgd", 8, 32, 256, 0.1, 5004, 0, 90),
    ("resnet50_imagenet_b8k_e90_sgd", 256, 32, 8192, 3.2, 156, 780, 90),
    ("resnet50_imagenet_b32k_e90_lars", 512, 64, 32768, 32.0, 39, 390, 90),
    ("alexnet_bn_imagenet_b32k_e100_lars", 512, 64, 32768, 32.0, 39, 390, 100),
]


@pytest.mark.parametrize(
    ("name", "devices", "per_device", "batch", "peak", "steps", "warmup", "epochs"), EXPECTED
)
def test_resolved_batch_lr_and_steps(
    name: str,
    devices: int,
    per_device: int,
    batch: int,
    peak: float,
    steps: int,
    warmup: int,
    epochs: int,
) -> None:
    cfg = get_recipe(name)
    for world in (1, 8):
        row = recipe_row(name, cfg, world_size=world, train_size=IMAGENET)
        assert row["global_batch"] == batch == devices * per_device
        assert row["accumulate"] == devices // world
        assert row["lr"] == pytest.approx(peak, rel=1e-12)
        assert row["steps_per_epoch"] == steps
        assert row["warmup_steps"] == warmup
        assert row["total_steps"] == steps * epochs
    assert (cfg.optim.simulate_world_size, cfg.data.batch_size) == (devices, per_device)


def test_every_imagenet_recipe_trains_on_imagenet_images() -> None:
    for name, *_ in EXPECTED:
        cfg = get_recipe(name)
        assert (cfg.data.layout, cfg.model.num_classes, cfg.model.frames) == ("imagenet", 1000, 1)
        train, val = cfg.data.train_clip, cfg.data.eval_clip
        assert (train.frames, train.crop, train.crop_size, train.flip) == (
            1,
            "random_resized",
            224,
            True,
        )
        assert (train.area, train.ratio) == ((0.08, 1.0), (3 / 4, 4 / 3))
        assert (val.frames, val.short_side, val.crop_size, val.num_crops) == (1, 256, 224, 1)
        assert cfg.optim.momentum == 0.9


def test_goyal_step_schedule_and_warmup() -> None:
    cfg = get_recipe("resnet50_imagenet_b8k_e90_sgd")
    assert (cfg.optim.name, cfg.optim.weight_decay, cfg.lr.schedule) == ("sgd", 1e-4, "step")
    plan = run_sizes(cfg, world_size=1, train_size=IMAGENET)
    spe = plan.steps_per_epoch

    def lr(epoch: float) -> float:
        return step_lr(plan, cfg, round(epoch * spe))

    # Gradual warmup from 0.1 (the 256 rate) to 3.2 over 5 epochs, then /10 at 30, 60, 80.
    assert lr(0) == pytest.approx(0.1)
    assert lr(2.5) == pytest.approx((0.1 + 3.2) / 2)
    got = [lr(e) for e in (5, 29.99, 30, 59.99, 60, 79.99, 80, 89.99)]
    assert got == pytest.approx([3.2, 3.2, 0.32, 0.32, 0.032, 0.032, 0.0032, 0.0032])
    base = get_recipe("resnet50_imagenet_b256_e90_sgd")
    base_plan = run_sizes(base, world_size=1, train_size=IMAGENET)
    assert step_lr(base_plan, base, 0) == pytest.approx(0.1)
    assert step_lr(base_plan, base, 30 * base_plan.steps_per_epoch) == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("name", "weight_decay", "epochs"),
    [
        ("resnet50_imagenet_b32k_e90_lars", 1e-4, 90),
        ("alexnet_bn_imagenet_b32k_e100_lars", 5e-4, 100),
    ],
)
def test_lars_poly_schedule(name: str, weight_decay: float, epochs: int) -> None:
    cfg = get_recipe(name)
    assert (cfg.optim.name, cfg.optim.eta, cfg.optim.weight_decay) == ("lars", 1e-3, weight_decay)
    assert (cfg.lr.schedule, cfg.lr.power, cfg.lr.warmup_start_factor) == ("poly", 2.0, 0.0)
    plan = run_sizes(cfg, world_size=1, train_size=IMAGENET)
    decay = plan.total_steps - plan.warmup_steps
    assert step_lr(plan, cfg, 0) == 0.0
    assert step_lr(plan, cfg, 195) == pytest.approx(16.0)  # half way up the 390-step warmup
    assert step_lr(plan, cfg, 390) == pytest.approx(32.0)
    # Half way through the decay: 32 x (1/2)^2 = 8; the last step: 32 / decay^2.
    assert step_lr(plan, cfg, 390 + decay // 2) == pytest.approx(8.0, rel=1e-3)
    assert step_lr(plan, cfg, plan.total_steps - 1) == pytest.approx(32.0 / decay**2)
    assert decay == 39 * (epochs - 10)


def test_demo_recipes_start_at_b0_and_scale_by_simulated_devices() -> None:
    for optimizer in ("sgd", "lars"):
        name = f"demo_resnet18_images_b64_e10_{optimizer}"
        cfg = get_recipe(name)
        assert (cfg.data.layout, cfg.model.name, cfg.data.train_clip.crop) == (
            "imagefolder",
            "resnet18",
            "random_resized",
        )
        assert cfg.data.train_clip.crop_size == cfg.data.eval_clip.crop_size == 32
        row = recipe_row(name, cfg, world_size=1, train_size=6400)
        assert (row["global_batch"], row["steps_per_epoch"], row["optimizer"]) == (
            64,
            100,
            optimizer,
        )
        peak = 0.05 if optimizer == "sgd" else 8 * math.sqrt(2)
        assert row["lr"] == pytest.approx(peak)
        # 16 B0 and 64 B0 on one process: accumulation, and the batch-scaling rule's rate.
        for devices, batch in ((32, 1024), (128, 4096)):
            scaled = batch_scaled_lr(
                optimizer, batch, recipe_lr_per_8_clips=cfg.optim.lr_per_8_clips
            )
            big = apply_overrides(
                cfg,
                [
                    f"optim.simulate_world_size={devices}",
                    f"optim.lr_per_8_clips={scaled.lr_per_8_clips}",
                ],
            )
            row = recipe_row(name, big, world_size=1, train_size=2 * batch)
            assert (row["global_batch"], row["accumulate"]) == (batch, devices)
            want = 0.05 * batch / 64 if optimizer == "sgd" else 8 * math.sqrt(batch / 32)
            assert row["lr"] == pytest.approx(want)


def test_recipes_command_prints_the_imagenet_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "imagenet", "--dataset-size", str(IMAGENET)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:8] for line in lines[2:]}
    assert {name for name, *_ in EXPECTED} <= set(rows)
    for name, devices, _, batch, peak, steps, warmup, epochs in EXPECTED:
        gpus, accum, b, lr, w, spe, ep = rows[name]
        assert (int(gpus), int(accum), int(b.replace(",", ""))) == (devices, devices, batch)
        assert (float(lr), int(w), int(spe), int(ep)) == (peak, warmup, steps, epochs)


def test_schedule_command_prints_the_poly_decay(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["schedule", "resnet50_imagenet_b32k_e90_lars", "--dataset-size", str(IMAGENET)]
    assert main(args) == 0
    out = capsys.readouterr().out
    table = {int(line.split()[0]): float(line.split()[5]) for line in out.splitlines()[2:92]}
    assert table[0] == 0.0 and table[10] == 32.0
    # Epoch 50 starts 40 of the 80 decay epochs in: 32 x (1/2)^2.
    assert table[50] == pytest.approx(8.0)
    assert "90 epochs, 3,510 steps" in out
