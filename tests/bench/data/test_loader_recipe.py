"""The benches load as the trainer loads: one recipe (`data.loaders.loader_options`) for workers,
pinning, persistence, start method, prefetch, worker set-up and collation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from vidscale.bench.data.data_wait import _wait_clip, _WaitRun
from vidscale.bench.scaling.config import ScalingConfig
from vidscale.bench.scaling.worker import RandomClips, random_loader
from vidscale.config import DataConfig
from vidscale.data.annotations import VideoRecord
from vidscale.data.dataset import VideoClipDataset
from vidscale.data.loaders import Placement, eval_loader, train_data
from vidscale.distributed.env import DistEnv

OPTIONS = (
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "worker_init_fn",
    "multiprocessing_context",
    "collate_fn",
)


def options(loader: DataLoader) -> dict[str, Any]:
    return {name: getattr(loader, name) for name in OPTIONS}


def test_every_bench_loader_is_set_up_as_the_trainers() -> None:
    records = [VideoRecord(Path(f"v{k}.mp4"), k % 2) for k in range(8)]  # never read here
    data = DataConfig(workers=2)
    trainer = train_data(data, records, seed=0, micro_batch=2, place=Placement())
    expected = options(trainer.loader)
    assert expected["prefetch_factor"] == 4 and expected["persistent_workers"]
    assert options(eval_loader(data, records, seed=0, place=Placement())) == expected
    wait = _WaitRun("tsn_resnet18", batch=2, steps=1, warmup=1, size=32)
    dataset = VideoClipDataset(records, _wait_clip(4, 32), train=True)
    assert options(wait.loader(dataset, workers=2, steps=2)) == expected
    cfg = ScalingConfig(batch=2, frames=2, size=16, num_classes=4, workers=2, warmup=1, steps=1)
    env = DistEnv(0, 0, 1, 1, torch.device("cpu"), backend="")
    clips = RandomClips(length=2, pool=2, frames=2, size=16, num_classes=4, seed=1)
    assert options(random_loader(clips, cfg, env)) == expected
