"""Multi-view testing: K clips x 3 crops per video, scores averaged per video, counted exactly
once per video on 1 and 2 real gloo processes, and wired through `evaluate_run`."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import cast

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from tests.distributed.multiproc import run_ranks
from tests.tiny_run import tiny_overrides
from vidscale.config import apply_overrides
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.inputs import ModelInput
from vidscale.data.samplers import ExactEvalSampler
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.models.registry import build_model
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import epoch_checkpoints, load_checkpoint
from vidscale.run.data import load_splits, resolve_data
from vidscale.scoring.evaluate import Stream, evaluate, video_scores
from vidscale.train import builders, loop
from vidscale.train.evaluation.eval_run import PAPER_VIEWS, Views, evaluate_run

N_VIDEOS = 7  # odd: a padding sampler would count one twice on 2 ranks
N_VIEWS = 6  # 2 clips x 3 crops
N_CLASSES = 5
CPU = torch.device("cpu")


def prepare(x: torch.Tensor) -> torch.Tensor:
    return x.float() / 255


class Scaled(ModelInput):
    def normalize(self, clips: torch.Tensor) -> torch.Tensor:
        return prepare(clips)


class MultiViewItems(torch.utils.data.Dataset):
    """Videos as (V, C, T, H, W) uint8 views, like `VideoClipDataset` with num_clips x num_crops."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(5)
        shape = (N_VIDEOS, N_VIEWS, 3, 2, 4, 4)
        self.clips = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        self.labels = torch.randint(0, N_CLASSES, (N_VIDEOS,), generator=g)

    def __len__(self) -> int:
        return N_VIDEOS

    def __getitem__(self, i: int) -> dict:
        return {
            "inputs": {"rgb": self.clips[i]},
            "label": int(self.labels[i]),
            "index": i,
            "skipped": [],
        }


def small_model() -> nn.Module:
    """BatchNorm makes the result depend on the batch unless the evaluator switches to eval()."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm3d(3), nn.Flatten(), nn.Linear(3 * 2 * 4 * 4, N_CLASSES))
    with torch.no_grad():
        bn = cast(nn.BatchNorm3d, model[0])
        assert bn.running_mean is not None and bn.running_var is not None
        bn.running_mean.uniform_(0.2, 0.6)
        bn.running_var.uniform_(0.5, 2.0)
    return model.train()  # evaluate() must put it in eval mode itself


def reference(model: nn.Module, data: MultiViewItems, average: str) -> tuple[float, float]:
    """top-1 (%) and mean loss, one view at a time through the model."""
    model.eval()
    hits, loss = 0, 0.0
    with torch.no_grad():
        for i in range(N_VIDEOS):
            logits = torch.cat([model(prepare(v[None])) for v in data.clips[i]])
            if average == "softmax":
                score = logits.softmax(-1).mean(0)
                loss -= math.log(float(score[data.labels[i]]))
            else:
                score = logits.mean(0)
                loss += float(nn.functional.cross_entropy(score[None], data.labels[i : i + 1]))
            hits += int(score.argmax() == data.labels[i])
    return 100.0 * hits / N_VIDEOS, loss / N_VIDEOS


def run_eval(env: DistEnv, average: str, views_per_forward: int) -> tuple[float, float, int]:
    data = MultiViewItems()
    sampler = ExactEvalSampler(len(data), rank=env.rank, world_size=env.world_size)
    loader = DataLoader(data, batch_size=3, sampler=sampler, collate_fn=collate)
    res = evaluate(
        Stream(small_model(), Scaled("rgb", 3)),
        loader,
        device=CPU,
        autocast=contextlib.nullcontext,
        average=average,  # type: ignore[arg-type]
        views_per_forward=views_per_forward,
    )
    return res.top1, res.loss, res.count


def test_video_scores_average_views_in_any_chunking() -> None:
    model = small_model().eval()
    clips = MultiViewItems().clips[:3]
    with torch.no_grad():
        per_view = model(prepare(clips.flatten(0, 1))).view(3, N_VIEWS, -1)
        for average, expected in (
            ("logits", per_view.mean(1)),
            ("softmax", per_view.softmax(-1).mean(1)),
        ):
            for chunk in (0, 1, 4):
                got = video_scores(
                    model,
                    clips,
                    prepare=prepare,
                    autocast=contextlib.nullcontext,
                    average=average,  # type: ignore[arg-type]
                    views_per_forward=chunk,
                )
                torch.testing.assert_close(got, expected)
        single = video_scores(model, clips[:, 0], prepare=prepare, autocast=contextlib.nullcontext)
        torch.testing.assert_close(single, per_view[:, 0])


@pytest.mark.parametrize("average", ["logits", "softmax"])
def test_multiview_matches_one_view_at_a_time(average: str) -> None:
    top1, loss, count = run_eval(DistEnv(0, 0, 1, 1, CPU, "gloo"), average, 4)
    ref_top1, ref_loss = reference(small_model(), MultiViewItems(), average)
    assert count == N_VIDEOS
    assert top1 == pytest.approx(ref_top1)
    assert loss == pytest.approx(ref_loss, rel=1e-5)


def test_multiview_on_two_ranks_counts_every_video_once() -> None:
    single = run_eval(DistEnv(0, 0, 1, 1, CPU, "gloo"), "logits", 0)
    for top1, loss, count in run_ranks(run_eval, 2, "logits", 5):
        assert count == N_VIDEOS
        assert top1 == pytest.approx(single[0])
        assert loss == pytest.approx(single[1], rel=1e-6)


def test_views_validate_and_apply() -> None:
    spec = get_recipe("demo_tsm_r18_8f_b32_e12").data.eval_clip
    paper = PAPER_VIEWS.apply(spec)
    assert (paper.num_clips, paper.num_crops, paper.short_side, paper.crop_size) == (
        10,
        3,
        256,
        256,
    )
    assert PAPER_VIEWS.per_video == 30
    kept = Views(num_clips=2).apply(spec)
    assert (kept.short_side, kept.crop_size, kept.frames) == (spec.short_side, spec.crop_size, 8)
    for bad in ({"num_crops": 2}, {"num_clips": 0}, {"average": "max"}):
        with pytest.raises(ValueError):
            Views(**bad)  # type: ignore[arg-type]


def test_evaluate_run_uses_the_requested_views(tiny_demo: Path, tmp_path: Path) -> None:
    cfg = apply_overrides(
        get_recipe("demo_tsm_r18_8f_b32_e12"), [*tiny_overrides(tiny_demo), "train.epochs=1"]
    )
    run = tmp_path / "run"
    loop.Trainer(cfg, run, init_distributed("cpu"), resume="never").run()
    views = Views(num_clips=2, num_crops=3, short_side=40, crop_size=32, views_per_forward=5)
    result = evaluate_run(run, last=3, views=views)

    # The same views built by hand, evaluated one view at a time.
    cfg = resolve_data(cfg, load_splits(cfg).classes)
    val = load_splits(cfg).val
    dataset = VideoClipDataset(val, views.apply(cfg.data.eval_clip), train=False)
    model = build_model(cfg.model)
    model.load_state_dict(load_checkpoint(epoch_checkpoints(run)[-1])["model"])
    model.eval()
    prep = builders.model_input(cfg).normalize
    hits = 0
    with torch.no_grad():
        for i in range(len(dataset)):
            item = dataset[i]
            assert item["inputs"]["rgb"].shape == (6, 3, 4, 32, 32)
            score = torch.cat([model(prep(v[None])) for v in item["inputs"]["rgb"]]).mean(0)
            hits += int(score.argmax() == item["label"])
    assert result["videos"] == len(val)
    assert [row["checkpoint"] for row in result["checkpoints"]] == [epoch_checkpoints(run)[-1].name]
    assert result["views"]["per_video"] == 6 and result["views"]["short_side"] == 40
    assert result["top1_mean"] == pytest.approx(100.0 * hits / len(val))
    assert result["top1_std"] == 0.0
