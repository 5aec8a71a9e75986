"""Exact evaluation: an uneven sample count over 2 real ranks counts every sample once."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils.data import DataLoader

from tests.distributed.multiproc import run_ranks
from vidscale.data.inputs import ModelInput
from vidscale.data.samplers import ExactEvalSampler
from vidscale.distributed.env import DistEnv
from vidscale.scoring.evaluate import Stream, evaluate


class Scaled(ModelInput):
    def normalize(self, clips: torch.Tensor) -> torch.Tensor:
        return clips.float() / 255


N_SAMPLES = 7  # odd: DistributedSampler would pad one duplicate
N_CLASSES = 3


class Items(torch.utils.data.Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(3)
        self.clips = torch.randint(0, 256, (N_SAMPLES, 3, 2, 4, 4), generator=g, dtype=torch.uint8)
        self.labels = torch.randint(0, N_CLASSES, (N_SAMPLES,), generator=g)

    def __len__(self) -> int:
        return N_SAMPLES

    def __getitem__(self, i: int) -> dict:
        return {"inputs": {"rgb": self.clips[i]}, "label": int(self.labels[i]), "skipped": []}


def collate(items: list[dict]) -> dict:
    return {
        "inputs": {"rgb": torch.stack([x["inputs"]["rgb"] for x in items])},
        "label": torch.tensor([x["label"] for x in items]),
        "skipped": [],
    }


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 2 * 4 * 4, N_CLASSES))


def run_eval(env: DistEnv) -> tuple[float, float, int]:
    data = Items()
    sampler = ExactEvalSampler(len(data), rank=env.rank, world_size=env.world_size)
    loader = DataLoader(data, batch_size=2, sampler=sampler, collate_fn=collate)
    res = evaluate(
        Stream(model(), Scaled("rgb", 3)),
        loader,
        device=torch.device("cpu"),
        autocast=contextlib.nullcontext,
    )
    return res.top1, res.loss, res.count


def test_exact_sharded_evaluation_counts_each_sample_once() -> None:
    single = run_eval(DistEnv(0, 0, 1, 1, torch.device("cpu"), "gloo"))
    ranks = run_ranks(run_eval, 2)
    assert single[2] == N_SAMPLES
    for top1, loss, count in ranks:
        assert count == N_SAMPLES
        assert abs(top1 - single[0]) < 1e-9
        assert abs(loss - single[1]) < 1e-6


def test_exact_eval_sampler_partitions_indices() -> None:
    shards = [list(ExactEvalSampler(N_SAMPLES, rank=r, world_size=3)) for r in range(3)]
    assert sorted(i for shard in shards for i in shard) == list(range(N_SAMPLES))
