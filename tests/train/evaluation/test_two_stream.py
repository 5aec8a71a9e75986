"""Two-stream late fusion (`eval --two-stream`, two-run `predict`) and predict == evaluate.

The runs are made directly (config.json + a checkpoint of a seeded, untrained model): the
checks are about identical numbers along independent paths, not about accuracy.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.data.flow_demo import write_flow_demo
from tests.tiny_run import is_share_of
from vidscale.cli import main
from vidscale.config import apply_overrides, save_config
from vidscale.data.inputs import ModelInput
from vidscale.data.prepared.prepare import open_prepared
from vidscale.data.prepared.shard_dataset import ShardClipDataset
from vidscale.distributed.env import init_distributed
from vidscale.models.registry import build_model
from vidscale.predict import load_run, run_probabilities, view_probabilities
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import save_checkpoint
from vidscale.run.data import load_splits, resolve_data
from vidscale.scoring.evaluate import Stream, evaluate
from vidscale.train import builders
from vidscale.train.evaluation.two_stream_eval import evaluate_two_stream

SMALL = [
    "data.workers=0",
    "data.batch_size=4",
    "data.train_clip.frames=3",
    "data.eval_clip.frames=3",
    "data.eval_clip.num_clips=2",
    "train.fast_path=false",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("two_stream")
    data, prep = write_flow_demo(root)
    made = {"data": data, "prep": prep}
    for name, recipe, extra in (
        ("rgb", "demo_tsm_r18_8f_b32_e12", [f"data.root={data}"]),
        ("flow", "demo_tsm_r18_flow_8f_b32_e10", [f"data.root={prep}"]),
    ):
        cfg = apply_overrides(get_recipe(recipe), extra + SMALL)
        cfg = resolve_data(cfg, load_splits(cfg).classes)
        torch.manual_seed(len(name))
        model = build_model(cfg.model)
        run = root / name
        (run / "checkpoints").mkdir(parents=True)
        save_config(cfg, run / "config.json")
        (run / "classes.txt").write_text((data / "classes.txt").read_text())
        save_checkpoint({"model": model.state_dict()}, run / "checkpoints" / "last.pt")
        made[name] = run
    return made


def test_predict_gives_the_evaluators_per_video_scores(runs: dict[str, Path]) -> None:
    loaded = load_run(runs["rgb"])
    cfg = loaded.cfg
    splits = load_splits(cfg)
    env = init_distributed("cpu")
    result = evaluate(
        Stream(loaded.model, builders.model_input(cfg)),
        builders.build_eval_loader(cfg, env, splits.val),
        device=env.device,
        autocast=contextlib.nullcontext,
        keep_scores=True,
    )
    assert sorted(result.scores) == list(range(len(splits.val)))
    for index, record in enumerate(splits.val):
        predicted = run_probabilities(record.path, loaded)
        torch.testing.assert_close(predicted, result.scores[index], atol=1e-6, rtol=1e-5)


def test_fusion_is_the_weighted_mean_of_the_streams_probabilities(runs: dict[str, Path]) -> None:
    weights = (1.0, 2.0)
    result = evaluate_two_stream(runs["rgb"], runs["flow"], weights=weights)
    # Independently: each stream's views through `view_probabilities`, fused by hand.
    rgb, flow = load_run(runs["rgb"]), load_run(runs["flow"])
    records = load_splits(rgb.cfg).val
    entries = {e.path: e for e in open_prepared(runs["prep"], modality="flow").val}
    flow_data = ShardClipDataset(list(entries.values()), flow.cfg.data.eval_clip, train=False)
    position = {e.path: i for i, e in enumerate(flow_data.entries)}
    hits = {"rgb": 0, "flow": 0, "fused": 0}
    for record in records:
        key = str(Path(record.path).absolute())
        p_rgb = run_probabilities(record.path, rgb)
        views = flow_data[position[key]]["inputs"]["flow"]
        p_flow = view_probabilities(
            flow.model, views, model_input=ModelInput.of(flow.cfg.data.eval_clip)
        )
        fused = (weights[0] * p_rgb + weights[1] * p_flow) / sum(weights)
        for name, p in (("rgb", p_rgb), ("flow", p_flow), ("fused", fused)):
            hits[name] += int(p.argmax() == record.label)
    n = len(records)
    assert result["videos"] == n
    assert result["top1"] == pytest.approx(100 * hits["fused"] / n)
    assert result["stream_top1"] == pytest.approx(
        {"rgb": 100 * hits["rgb"] / n, "flow": 100 * hits["flow"] / n}
    )
    best = max(result["stream_top1"].values())
    assert result["gain_over_best_stream"] == pytest.approx(result["top1"] - best)


def test_two_stream_commands(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--two-stream", str(runs["rgb"]), str(runs["flow"]), "--weights", "1,2"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["stream_top1"]) == {"rgb", "flow"}
    for top1 in (out["top1"], *out["stream_top1"].values()):
        assert is_share_of(top1, out["videos"]), out
    video = next(iter(sorted((runs["data"] / "videos" / "val").rglob("*.mp4"))))
    assert (
        main(
            [
                "predict",
                str(runs["rgb"]),
                str(video),
                "--flow-run",
                str(runs["flow"]),
                "--json",
                "--topk",
                "8",
            ]
        )
        == 0
    )
    probs = [p["probability"] for p in json.loads(capsys.readouterr().out)["predictions"]]
    assert len(probs) == 8 and np.isclose(sum(probs), 1.0, atol=1e-5)
    # The roles are checked: a flow run given as the RGB stream is one line, exit 2.
    assert main(["eval", "--two-stream", str(runs["flow"]), str(runs["rgb"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "flow run given as the rgb stream" in err[0]
