"""Multi-label evaluation: sigmoid scores aggregated over views, mAP over every video once,
checked against scikit-learn on 1 and 2 real processes, and two streams fused."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from tests.distributed.multiproc import run_ranks
from vidscale.config import ConfigError, RunConfig
from vidscale.data.data_config import DataConfig
from vidscale.data.inputs import ModelInput
from vidscale.data.samplers import ExactEvalSampler
from vidscale.distributed.env import DistEnv
from vidscale.scoring.evaluate import Stream, evaluate
from vidscale.step.objective import BinaryCrossEntropy, CrossEntropy, objective_for
from vidscale.train.evaluation.two_stream_eval import fused_labels

VIDEOS, VIEWS, CLASSES = 9, 3, 5  # odd: the two ranks hold 5 and 4 videos


class Scaled(ModelInput):
    def normalize(self, clips: torch.Tensor) -> torch.Tensor:
        return clips.float() / 255


class Videos(torch.utils.data.Dataset):
    """VIDEOS videos of VIEWS views, each with 1-2 positives (class 4 never positive)."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(5)
        shape = (VIDEOS, VIEWS, 3, 2, 4, 4)
        self.clips = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        self.targets = (torch.rand(VIDEOS, CLASSES, generator=g) < 0.4).float()
        self.targets[:, -1] = 0
        self.targets[torch.arange(VIDEOS), torch.arange(VIDEOS) % (CLASSES - 1)] = 1

    def __len__(self) -> int:
        return VIDEOS

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"clip": self.clips[i], "targets": self.targets[i], "index": i}


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "inputs": {"rgb": torch.stack([x["clip"] for x in items])},
        "label": torch.full((len(items),), -1),
        "targets": torch.stack([x["targets"] for x in items]),
        "index": torch.tensor([x["index"] for x in items]),
        "skipped": [],
    }


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 2 * 4 * 4, CLASSES))


def reference(how: str, weights: tuple[float, ...] = (1.0,)) -> tuple[float, float]:
    """Independently: each view's sigmoid, combined over views, fused over models by weight;
    mAP by scikit-learn over the classes with a positive; hit@1 by hand."""
    # Imported here: collecting this module (`pytest -m cuda` on an image without scikit-learn)
    # must not need it.
    from sklearn.metrics import average_precision_score

    data = Videos()
    views = data.clips.flatten(0, 1).float() / 255
    fused = torch.zeros(VIDEOS, CLASSES)
    with torch.no_grad():
        for seed, w in enumerate(weights):
            p = model(seed)(views).sigmoid().view(VIDEOS, VIEWS, CLASSES)
            per_video = p.mean(1) if how == "mean" else p.amax(1)
            fused += w / sum(weights) * per_video
    t = data.targets
    aps = [
        average_precision_score(t[:, k].numpy(), fused[:, k].numpy())
        for k in range(CLASSES)
        if t[:, k].any()
    ]
    hit1 = 100.0 * float(t.gather(1, fused.argmax(1, keepdim=True)).sum()) / VIDEOS
    return sum(aps) / len(aps), hit1


def run_eval(env: DistEnv, how: str, streams: int = 1) -> tuple[float, float, int, dict]:
    data = Videos()
    sampler = ExactEvalSampler(len(data), rank=env.rank, world_size=env.world_size)
    loader = DataLoader(data, batch_size=2, sampler=sampler, collate_fn=collate)
    weights = (1.0, 3.0)[:streams]
    res = evaluate(
        [
            Stream(model(seed), Scaled("rgb", 3), weight=w, label=f"s{seed}")
            for seed, w in enumerate(weights)
        ],
        loader,
        device=torch.device("cpu"),
        autocast=contextlib.nullcontext,
        multi_label=how,  # type: ignore[arg-type]
    )
    assert res.map is not None
    return res.map, res.top1, res.count, res.stream_map


ONE = DistEnv(0, 0, 1, 1, torch.device("cpu"), "gloo")


@pytest.mark.parametrize("how", ["mean", "max"])
def test_map_equals_scikit_learn_on_one_and_two_processes(how: str) -> None:
    want_map, want_hit1 = reference(how)
    single = run_eval(ONE, how)
    assert single[0] == pytest.approx(want_map, abs=1e-6)
    assert single[1] == pytest.approx(want_hit1)
    assert single[2] == VIDEOS
    for got in run_ranks(run_eval, 2, how):
        assert got[2] == VIDEOS
        assert got[0] == single[0]  # every video once: the same mAP, exactly
        assert got[1] == single[1]


def test_two_streams_fuse_sigmoid_probabilities() -> None:
    want_map, _ = reference("max", weights=(1.0, 3.0))
    fused, _, _, by_stream = run_eval(ONE, "max", streams=2)
    assert fused == pytest.approx(want_map, abs=1e-6)
    assert set(by_stream) == {"s0", "s1"}
    assert by_stream["s0"] == pytest.approx(reference("max", weights=(1.0,))[0], abs=1e-6)


def test_map_chance_is_the_mean_positive_rate_of_the_scored_classes() -> None:
    data = Videos()
    res = evaluate(
        Stream(model(0), Scaled("rgb", 3)),
        DataLoader(data, batch_size=4, collate_fn=collate),
        device=torch.device("cpu"),
        autocast=contextlib.nullcontext,
        multi_label="mean",
    )
    rates = data.targets[:, :-1].mean(0)  # the last class has no positive: not scored
    assert res.map_chance == pytest.approx(float(rates.mean()))
    assert res.score == pytest.approx(100.0 * res.map)  # type: ignore[operator]


def test_a_multi_label_batch_without_targets_is_refused() -> None:
    batch = collate([Videos()[0]])
    del batch["targets"]
    with pytest.raises(ValueError, match="multi-hot targets"):
        evaluate(
            Stream(model(0), Scaled("rgb", 3)),
            [batch],
            device=torch.device("cpu"),
            autocast=contextlib.nullcontext,
            multi_label="mean",
        )


def test_the_objective_follows_the_data() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])
    targets = torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    bce = objective_for(multi_label=True)
    assert isinstance(bce, BinaryCrossEntropy)
    p = logits.sigmoid()
    by_hand = -(targets * p.log() + (1 - targets) * (1 - p).log()).mean()
    assert float(bce.loss(logits, targets)) == pytest.approx(float(by_hand), rel=1e-6)
    assert bce.hits(logits, targets) == 1  # row 0's best class is positive, row 1's is not
    assert isinstance(objective_for(multi_label=False), CrossEntropy)
    with pytest.raises(ValueError, match="multi-hot"):
        bce.targets({"label": torch.tensor([-1, -1])}, torch.device("cpu"))


def test_a_single_label_and_a_multi_label_run_do_not_fuse() -> None:
    single = RunConfig()
    multi = RunConfig(data=DataConfig(layout="multilabel", multi_label=True, eval_aggregate="max"))
    assert fused_labels(multi, multi) == "max"
    assert fused_labels(single, single) is None
    with pytest.raises(ConfigError, match="do not fuse"):
        fused_labels(multi, single)
