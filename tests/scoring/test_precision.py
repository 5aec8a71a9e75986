"""One rule for the arithmetic of every score (`scoring.precision`): `eval` and `predict` give a
video the same probabilities for a run recorded as trained in bf16, views and aggregation
included, on a single-label dataset (2 clips, logits and softmax averaging) and on a timed
multi-label one (Charades layout, the max over 2 clips).

Before the rule, `eval` scored under the run's recorded bf16 autocast and `predict` in fp32,
so the two disagreed by bf16's rounding. The runs here train for one epoch with
`train.amp=bf16` and channels-last (explicit: no probe), so their checkpoints record a bf16
fast path on any CPU (emulated where it has no bf16 units)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.data.layouts.test_charades_layout import charades  # noqa: F401  (the fixture)
from tests.tiny_run import tiny_overrides
from vidscale.config import Precision, apply_overrides
from vidscale.distributed.env import init_distributed
from vidscale.predict import load_run, run_probabilities
from vidscale.recipes import get_recipe
from vidscale.run.record import read_record
from vidscale.scoring.evaluate import Average
from vidscale.scoring.precision import scoring_arithmetic
from vidscale.train import loop
from vidscale.train.evaluation.eval_run import Views, evaluate_run

BF16_RUN = ["train.epochs=1", "train.amp=bf16", "train.channels_last=on"]
# fp32 on both sides, what remains is the order of sums (several videos a batch and
# channels-last in eval, one video and contiguous in predict): under 1e-7 here. The nearly
# untrained models' probabilities are near uniform, so bf16 moves them by only ~1e-5: the
# tolerance must stay well below that (the single-label test checks it does).
ATOL = 1e-6


def train_run(recipe: str, overrides: list[str], out: Path) -> Path:
    cfg = apply_overrides(get_recipe(recipe), [*overrides, *BF16_RUN])
    loop.Trainer(cfg, out, init_distributed("cpu"), resume="never").run()
    record = read_record(out / "checkpoints" / "epoch_0001.pt").fast_path
    assert record is not None and record.bf16  # the run trained, and is recorded so, in bf16
    return out


def predicted(run: Path, video: str, *, average: Average, precision: Precision) -> torch.Tensor:
    loaded = load_run(run, checkpoint="epoch_0001")
    arithmetic = scoring_arithmetic(precision, "cpu")
    return run_probabilities(
        Path(video), loaded, num_clips=2, average=average, arithmetic=arithmetic
    )


def compare(run: Path, report: dict[str, Any], *, average: Average) -> None:
    """Every video eval scored has predict's probabilities, at the report's precision."""
    [row] = report["checkpoints"]
    scores = row["video_scores"]
    assert scores and len(scores) == report["videos"]
    for video, probs in scores.items():
        mine = predicted(run, video, average=average, precision=report["precision"])
        torch.testing.assert_close(torch.tensor(probs), mine, atol=ATOL, rtol=0.0)


@pytest.mark.slow
def test_eval_and_predict_score_a_single_label_video_alike(tiny_demo: Path, tmp_path: Path) -> None:
    sets = [*tiny_overrides(tiny_demo), "data.eval_clip.num_clips=2"]
    run = train_run("demo_tsm_r18_8f_b32_e12", sets, tmp_path / "run")
    assert json.loads((run / "summary.json").read_text())["eval_precision"] == "fp32"
    for average in ("logits", "softmax"):
        report = evaluate_run(run, views=Views(num_clips=2, average=average), keep_scores=True)
        assert report["precision"] == "fp32"
        compare(run, report, average=average)

    # bf16 when asked for: the report says so, and the scores move by more than the tolerance
    # (so the comparison above tells bf16 from fp32, as eval's and predict's once differed).
    bf16 = evaluate_run(run, precision="bf16", keep_scores=True)
    assert bf16["precision"] == "bf16"
    fp32 = evaluate_run(run, keep_scores=True)
    [bf16_row], [fp32_row] = bf16["checkpoints"], fp32["checkpoints"]
    differences = [
        (torch.tensor(bf16_row["video_scores"][v]) - torch.tensor(p)).abs().max().item()
        for v, p in fp32_row["video_scores"].items()
    ]
    assert max(differences) > 3 * ATOL


@pytest.mark.slow
def test_eval_and_predict_score_a_charades_video_alike(
    charades: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    sets = [
        *tiny_overrides(charades),
        "data.layout=charades",
        "data.skip_missing=true",
        "data.multi_label=true",
        "data.eval_aggregate=max",
        "data.eval_clip.num_clips=2",
        "data.batch_size=2",
    ]
    run = train_run("demo_tsm_r18_multilabel_8f_b32_e10", sets, tmp_path / "run")
    report = evaluate_run(run, keep_scores=True)
    assert report["precision"] == "fp32" and report["views"]["aggregate"] == "max"
    assert report["views"]["num_clips"] == 2
    compare(run, report, average="logits")  # multi-label: the max of the views' sigmoids
