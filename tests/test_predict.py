"""`vidscale predict`: a real video file through a run directory to class names.

One run is trained here for a few seconds on demo videos (the end-to-end check: training's
config.json, classes.txt and checkpoint are all predict needs). The other runs are made
directly: a tsm_resnet18 whose fc has zero weights and a bias that strongly favours one class,
so the right answer is known without training.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from vidscale.config import DataConfig, RunConfig, apply_overrides, save_config
from vidscale.data.annotations import write_annotations
from vidscale.data.clip import ClipSpec
from vidscale.data.inputs import ModelInput
from vidscale.data.synthetic.videos import write_synthetic_dataset
from vidscale.data.synthetic.writer import encode_h264
from vidscale.models.registry import ModelConfig, build_model
from vidscale.predict import (
    predict,
    predictions_as_dict,
    sample_views,
    view_probabilities,
)
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import save_checkpoint
from vidscale.run.ref import checkpoint_path, locate
from vidscale.train.loop import train

CLASSES = ["waving", "jumping", "clapping"]
FRAMES, SIZE = 4, 32


def make_run(
    root: Path,
    *,
    name: str = "tsm_resnet18",
    favour: int | None = None,
    classes_in_run: bool = True,
) -> Path:
    """A run directory: config.json, checkpoints/last.pt (+ epoch_0001.pt), classes.txt in the
    run (or only in the dataset root that config.json names)."""
    data, run = root / "data", root / "run"
    data.mkdir(parents=True)
    (data / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    spec = ClipSpec(frames=FRAMES, crop_size=SIZE, short_side=SIZE, flip=False)
    cfg = RunConfig(
        model=ModelConfig(name=name, num_classes=len(CLASSES), frames=FRAMES),
        data=DataConfig(root=str(data), eval_clip=spec),
    )
    torch.manual_seed(0)
    model = build_model(cfg.model)
    if favour is not None:
        fc = model.trunk.fc  # type: ignore[union-attr]
        assert isinstance(fc, nn.Linear)
        with torch.no_grad():
            fc.weight.zero_()
            fc.bias.fill_(-10.0)
            fc.bias[favour] = 10.0
    run.mkdir()
    save_config(cfg, run / "config.json")
    if classes_in_run:
        (run / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    state = {"model": model.state_dict(), "epoch": 1}
    save_checkpoint(state, run / "checkpoints" / "last.pt")
    save_checkpoint(state, run / "checkpoints" / "epoch_0001.pt")
    return run


def write_clip(path: Path, *, frames: int = 12, height: int = 32, width: int = 48) -> Path:
    rng = np.random.default_rng(0)
    video = rng.integers(0, 256, size=(frames, height, width, 3), dtype=np.uint8)
    encode_h264(video, path, fps=15, gop=4)
    return path


DEMO_PAIR = ("moving_left", "moving_right")


def train_demo_run(root: Path) -> tuple[Path, Path]:
    """(run, demo data): the demo recipe's TSM-ResNet-18 trained for 30 steps on two demo
    videos, one of each class of an order-reversed pair.

    Two videos are learnt in seconds (their random textures differ as well as their motion),
    and an untrained model names a random class, so both right is the outcome of training.
    Every source of randomness is seeded and the run uses one thread in float32 (no bf16 fast
    path, which only some CPUs have), so the outcome does not vary from run to run, and the
    right class wins by a wide margin.
    """
    data = root / "demo"
    write_synthetic_dataset(data, seed=1, train_per_class=1, val_per_class=0, size=32, num_frames=8)
    rows = [(f"videos/train/{c}/{c}_0000.mp4", c) for c in DEMO_PAIR]
    write_annotations(data / "train.csv", rows * 10)  # 10 steps of 2 clips per epoch
    write_annotations(data / "val.csv", rows)
    overrides = [
        f"data.root={data}",
        "data.batch_size=2",
        "data.workers=0",
        "data.train_clip.frames=4",
        "data.train_clip.scales=[1.0]",
        "data.eval_clip.frames=4",
        "optim.simulate_world_size=0",
        "optim.lr_per_8_clips=0.02",
        "lr.warmup_epochs=0",
        "model.dropout=0.0",
        "train.epochs=3",
        "train.eval_every=3",
        "train.keep_checkpoints=1",
        "train.fast_path=false",
        "train.threads=1",
        "train.progress=false",
    ]
    cfg = apply_overrides(get_recipe("demo_tsm_r18_8f_b32_e12"), overrides)
    train(cfg, run_dir=root / "run")
    return root / "run", data


@pytest.mark.slow
def test_predict_names_the_class_of_demo_videos_after_training(tmp_path: Path) -> None:
    run, data = train_demo_run(tmp_path)
    for label in DEMO_PAIR:
        video = data / "videos" / "train" / label / f"{label}_0000.mp4"
        top = predict(video, run=run, topk=2)
        assert top[0][0] == label, top
        assert top[0][1] > 0.5  # of two trained classes, the right one has most of the mass
    # A checkpoint file inside the run works as well as the run directory.
    assert locate(run / "checkpoints" / "epoch_0003.pt") == (
        run,
        str(run / "checkpoints" / "epoch_0003.pt"),
    )
    assert checkpoint_path(run, "best") == run / "checkpoints" / "epoch_0003.pt"


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_clip(tmp_path_factory.mktemp("video") / "clip.mp4")


def test_predict_names_the_class_the_checkpoint_favours(tmp_path: Path, video: Path) -> None:
    run = make_run(tmp_path, favour=2)
    top = predict(video, run=run, topk=3)
    assert top[0][0] == "clapping"
    assert top[0][1] > 0.99
    assert sorted((p for _, p in top), reverse=True) == [p for _, p in top]
    assert sum(p for _, p in top) == pytest.approx(1.0, abs=1e-5)  # all 3 classes listed
    out = predictions_as_dict(video, top[:1])
    assert json.loads(json.dumps(out))["predictions"][0]["label"] == "clapping"
    assert out["precision"] == "fp32"


def test_multi_view_prediction_and_class_list_from_the_dataset(tmp_path: Path, video: Path) -> None:
    run = make_run(tmp_path, favour=0, classes_in_run=False)  # names from data.root
    top = predict(video, run=run, checkpoint="epoch_0001", topk=1, num_clips=2, num_crops=3)
    assert top[0][0] == "waving" and top[0][1] > 0.99


def test_missing_class_list_and_checkpoint_are_named(tmp_path: Path, video: Path) -> None:
    run = make_run(tmp_path, favour=0, classes_in_run=False)
    (tmp_path / "data" / "classes.txt").unlink()
    with pytest.raises(FileNotFoundError, match="classes"):
        predict(video, run=run)
    with pytest.raises(FileNotFoundError, match="epoch_0001"):
        checkpoint_path(run, "epoch_0009")


def test_views_are_clips_times_crops(video: Path) -> None:
    spec = ClipSpec(frames=FRAMES, crop_size=24, short_side=24, num_clips=2, num_crops=3)
    views = sample_views(video, spec)
    assert views.shape == (6, 3, FRAMES, 24, 24) and views.dtype == torch.uint8
    # The landscape frame (24 x 36 after resizing) gives left, centre and right crops.
    assert not torch.equal(views[0], views[2])


class _MeanLogit(nn.Module):
    """Logits (m, -m) from each clip's mean value m: views with different content disagree."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        m = clips.mean(dim=(1, 2, 3, 4)) * self.scale
        return torch.stack([m, -m], dim=1)


def test_view_probabilities_average_views_as_the_evaluator_does() -> None:
    views = torch.stack([torch.full((3, 2, 4, 4), v, dtype=torch.uint8) for v in (0, 255)])
    mean = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1, 1)
    std = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1, 1)
    logits = [torch.stack([m, -m]) for v in (0.0, 255.0) if (m := ((v - mean) / std).mean())]
    rgb = ModelInput("rgb", 3)
    by_logits = view_probabilities(_MeanLogit(), views, model_input=rgb)
    by_softmax = view_probabilities(_MeanLogit(), views, model_input=rgb, average="softmax")
    zero = torch.zeros(2)
    expected_logits = (sum(logits, zero) / 2).softmax(0)
    expected_softmax = sum((x.softmax(0) for x in logits), zero) / 2
    assert torch.allclose(by_logits, expected_logits, atol=1e-6)
    assert torch.allclose(by_softmax, expected_softmax, atol=1e-6)
    assert not torch.allclose(by_logits, by_softmax, atol=1e-3)
    assert by_logits.sum().item() == pytest.approx(1.0)
