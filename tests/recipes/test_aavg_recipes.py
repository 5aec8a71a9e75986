"""The AAVG paper's RGB recipes (Cong et al., §II-IV, Table I) resolve to the paper's values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vidscale.cli import main
from vidscale.config import ConfigError, RunConfig, apply_overrides, validate
from vidscale.data.clip import frame_indices
from vidscale.data.transforms import eval_crops, multiscale_crop_box, train_transform
from vidscale.models.registry import build_model, default_frames
from vidscale.recipes import get_recipe, list_recipes
from vidscale.recipes.aavg import CROP_SIDES, FRAME_HW, TEST_SAMPLES
from vidscale.run.data import load_splits, resolve_num_classes
from vidscale.run.timeline import recipe_row, run_sizes, step_lr
from vidscale.train.evaluation.eval_run import Views
from vidscale.train.phases.adaptive_batch import AdaptiveBatch

TRAIN_SIZE = {"ucf101": 9537, "hmdb51": 3570}  # split 1 training videos
CLASSES = {"ucf101": 101, "hmdb51": 51}
DATASETS = tuple(TRAIN_SIZE)
BASELINES = {d: f"sgd_tsn_r152_{d}_rgb_1f_b32_e500" for d in DATASETS}
AAVG = {(v, d): f"aavg{v}_tsn_r152_{d}_rgb_1f_b32x16_e100" for v in (1, 2, 3) for d in DATASETS}


def test_every_paper_recipe_is_registered_and_valid() -> None:
    names = set(BASELINES.values()) | set(AAVG.values())
    assert names <= set(list_recipes())
    for name in names:
        validate(get_recipe(name))


@pytest.mark.parametrize("dataset", DATASETS)
def test_baseline_is_sgd_at_001_halved_every_50_epochs(dataset: str) -> None:
    cfg = get_recipe(BASELINES[dataset])
    plan = run_sizes(cfg, world_size=1, train_size=TRAIN_SIZE[dataset])
    assert (plan.global_batch, plan.accumulate, plan.warmup_steps) == (32, 1, 0)
    assert plan.base_lr == pytest.approx(0.01)
    assert (cfg.optim.name, cfg.dist.strategy, cfg.train.epochs) == ("sgd", "ddp", 500)
    spe = plan.steps_per_epoch
    for epoch, halvings in [(0, 0), (49, 0), (50, 1), (99, 1), (100, 2), (450, 9), (499, 9)]:
        assert step_lr(plan, cfg, epoch * spe) == pytest.approx(0.01 / 2**halvings), epoch
    assert step_lr(plan, cfg, 50 * spe - 1) == pytest.approx(0.01)


def test_baseline_is_one_learner() -> None:
    with pytest.raises(ConfigError, match="simulate_world_size"):
        run_sizes(get_recipe(BASELINES["ucf101"]), world_size=2, train_size=9537)


@pytest.mark.parametrize(("variant", "dataset"), list(AAVG))
def test_aavg_variant_flags(variant: int, dataset: str) -> None:
    cfg = get_recipe(AAVG[(variant, dataset)])
    assert (cfg.dist.strategy, cfg.aavg.k, cfg.aavg.lr_rule) == ("aavg", -1, "unchanged")
    assert cfg.aavg.adaptive_batch == (variant >= 2)
    assert cfg.aavg.merge_optimizer_state == cfg.aavg.merge_bn == (variant == 3)
    assert (cfg.aavg.b1, cfg.aavg.b2, cfg.aavg.max_batch) == (1.0, 2, 576)
    assert (cfg.optim.name, cfg.optim.weight_decay, cfg.train.epochs) == ("adam", 0.0, 100)
    assert (cfg.lr.schedule, cfg.lr.warmup_epochs) == ("constant", 0.0)


@pytest.mark.parametrize("world", [1, 2, 4, 8, 16])
def test_aavg_keeps_16_x_32_and_adam_1e3_on_any_process_count(world: int) -> None:
    for dataset in DATASETS:
        row = recipe_row("x", get_recipe(AAVG[(1, dataset)]), world_size=world, train_size=9537)
        assert (row["global_batch"], row["clips_per_gpu"]) == (512, 32)
        assert row["accumulate"] == 16 // world
        assert row["lr"] == pytest.approx(1e-3)
        # §III-A: "with B = 32 and P = 16, the number of batches ... in an epoch is about 18"
        assert row["steps_per_epoch"] == 18


@pytest.mark.parametrize("world", [1, 4, 16])
def test_adaptive_batch_doubles_to_576_per_learner(world: int) -> None:
    # §III-B: B doubles whenever accuracy does not improve (b1 = 1, b2 = 2), at most 576; the
    # rule counts the recipe's 16 learners, so the global batches are the same on any W.
    cfg = get_recipe(AAVG[(2, "ucf101")])
    rule = AdaptiveBatch.from_config(cfg, world_size=world, global_batch=512)
    for epoch, accuracy in enumerate([50.0, 40.0, 45.0, 50.0, 49.0, 10.0, 10.0, 60.0], start=1):
        rule.observe(accuracy, epochs_done=epoch)
    assert [b for _, b in rule.history] == [16 * b for b in (32, 64, 128, 256, 512, 576)]


def test_hmdb51_epoch_is_6_steps() -> None:
    row = recipe_row("x", get_recipe(AAVG[(3, "hmdb51")]), world_size=16, train_size=3570)
    assert row["steps_per_epoch"] == 6


@pytest.mark.parametrize("name", [*BASELINES.values(), *AAVG.values()])
def test_model_and_clips_follow_section_2(name: str) -> None:
    cfg = get_recipe(name)
    assert (cfg.model.name, cfg.model.frames, cfg.model.pretrained) == ("tsn_resnet152", 1, None)
    assert cfg.model.num_classes == CLASSES[cfg.data.layout] and cfg.data.split == 1
    train, val = cfg.data.train_clip, cfg.data.eval_clip
    assert (train.frames, train.crop_size, train.flip) == (1, 224, True)
    assert (val.frames, val.crop_size, val.short_side, val.flip) == (1, 224, 256, False)
    assert (val.num_clips, val.num_crops) == (5, 1)


def test_multiscale_crop_sides_on_a_256x340_frame() -> None:
    scales = get_recipe(AAVG[(1, "ucf101")]).data.train_clip.scales
    rng = np.random.default_rng(0)
    boxes = [
        multiscale_crop_box(*FRAME_HW, size=224, scales=scales, max_distort=1, rng=rng)
        for _ in range(2000)
    ]
    assert {b.width for b in boxes} == {b.height for b in boxes} == set(CROP_SIDES)
    for b in boxes:  # each box inside the frame, sides at most one size apart
        assert b.x + b.width <= FRAME_HW[1] and b.y + b.height <= FRAME_HW[0]
        assert abs(CROP_SIDES.index(b.width) - CROP_SIDES.index(b.height)) <= 1


def frame(height: int, width: int) -> np.ndarray:
    """One (T=1, H, W, 3) uint8 frame whose pixels encode their position."""
    ys, xs = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    pixels = np.stack([ys % 256, xs % 256, (ys + xs) % 256], axis=-1)
    return pixels.astype(np.uint8)[None]


def test_train_and_validation_views_of_a_256x340_frame() -> None:
    cfg = get_recipe(AAVG[(1, "ucf101")])
    train, val = cfg.data.train_clip, cfg.data.eval_clip
    clip = train_transform(
        frame(*FRAME_HW),
        size=train.crop_size,
        scales=train.scales,
        flip=train.flip,
        rng=np.random.default_rng(1),
    )
    assert clip.shape == (3, 1, 224, 224)
    # Validation: the centre 224 x 224 of the 256 x 340 frame, not rescaled.
    (view,) = eval_crops(
        frame(*FRAME_HW), short_side=val.short_side, size=val.crop_size, num_crops=val.num_crops
    )
    centre = torch.from_numpy(frame(*FRAME_HW))[0, 16:240, 58:282].permute(2, 0, 1)
    assert torch.equal(view[:, 0], centre)


def test_validation_and_final_test_samples_are_spread_over_the_video() -> None:
    val = get_recipe(AAVG[(3, "ucf101")]).data.eval_clip
    final = Views(num_clips=TEST_SAMPLES).apply(val)  # `vidscale eval RUN --clips 25`
    for spec, count in ((val, 5), (final, 25)):
        picks = [int(frame_indices(250, spec, rng=None, clip_index=k)[0]) for k in range(count)]
        assert picks == sorted(set(picks)) and len(picks) == count
        assert picks[0] < 250 / count and picks[-1] >= 250 - 250 / count


def test_the_model_has_101_outputs_and_one_frame_by_default() -> None:
    cfg = get_recipe(AAVG[(1, "ucf101")])
    assert default_frames(cfg.model.name) == 1
    with torch.device("meta"):
        model = build_model(cfg.model)
    assert model.trunk.fc.out_features == 101  # type: ignore[union-attr]
    assert len(model.trunk.layer3) == 36  # type: ignore[union-attr,arg-type]  # ResNet-152


def _touch(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _ucf101(root: Path) -> None:
    """A UCF101 tree of 101 classes, one training and one test (empty) video each."""
    names = [f"Class{i:03d}" for i in range(CLASSES["ucf101"])]
    lists = root / "ucfTrainTestlist"
    _touch(lists / "classInd.txt", "".join(f"{i} {c}\n" for i, c in enumerate(names, 1)))
    for group in ("g01", "g08"):
        for c in names:
            _touch(root / "UCF-101" / c / f"v_{c}_{group}_c01.avi")
    train = "".join(f"{c}/v_{c}_g08_c01.avi {i}\n" for i, c in enumerate(names, 1))
    _touch(lists / "trainlist01.txt", train)
    _touch(lists / "testlist01.txt", "".join(f"{c}/v_{c}_g01_c01.avi\n" for c in names))


def _hmdb51(root: Path) -> None:
    """An HMDB51 tree of 51 classes, one training and one test (empty) video each."""
    for i in range(CLASSES["hmdb51"]):
        c = f"class{i:02d}"
        for video in ("a.avi", "b.avi"):
            _touch(root / c / video)
        _touch(root / "testTrainMulti_7030_splits" / f"{c}_test_split1.txt", "a.avi 1\nb.avi 2\n")


@pytest.mark.parametrize("dataset", DATASETS)
def test_class_count_matches_the_layout(dataset: str, tmp_path: Path) -> None:
    (_ucf101 if dataset == "ucf101" else _hmdb51)(tmp_path)
    cfg: RunConfig = apply_overrides(get_recipe(AAVG[(2, dataset)]), [f"data.root={tmp_path}"])
    splits = load_splits(cfg)
    assert len(splits.classes) == CLASSES[dataset]
    assert resolve_num_classes(cfg, splits.classes) == cfg  # no mismatch, nothing to fill in


def test_recipes_command_lists_the_aavg_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "aavg", "--world-size", "16", "--dataset-size", "9537"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    names = [line.split()[0] for line in lines]
    assert sorted(n for n in names if "_rgb_" in n) == sorted(AAVG.values())
    assert sorted(n for n in names if "_flow_" in n) == [
        "aavg3_tsn_r152_hmdb51_flow_1f_b32x16_e100",
        "aavg3_tsn_r152_ucf101_flow_1f_b32x16_e100",
    ]
    assert all(line.split()[1:7] == ["16", "1", "512", "0.001", "0", "18"] for line in lines)
