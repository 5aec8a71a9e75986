"""How much of a training step waits for data (TSM paper Fig. 3b): `bench_data_wait` trains a
real model for a few steps (the trainer's `step.run.train_step`) with the real `DataLoader` and
measures the fraction of step time blocked waiting for the next batch (data loading not hidden
by compute) for several clip lengths and loader worker counts."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch.utils.data import DataLoader

from vidscale.bench.data.dataload import (
    BenchVideoSpec,
    find_videos,
    make_bench_videos,
    prepare_shards,
)
from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.inputs import ModelInput
from vidscale.data.prepared.shard_dataset import ShardClipDataset
from vidscale.models.registry import ModelConfig, build_model
from vidscale.step.fixed_batch import bench_sgd
from vidscale.step.run import StepContext, train_step

WAIT_BENCH_LR = 1e-3


@dataclass(frozen=True)
class WaitRow:
    model: str
    frames: int
    workers: int
    batch: int
    steps: int
    step_s: float  # mean over the timed steps
    wait_s: float  # mean time blocked on the next batch
    wait_fraction: float


def bench_data_wait(
    model_name: str,
    *,
    batch: int,
    frames_list: Sequence[int] = (8, 16, 32),
    workers_list: Sequence[int] = (0, 1, 2),
    steps: int = 3,
    warmup: int = 1,
    size: int = 112,
    source: Literal["videos", "shards"] = "videos",
    videos_dir: Path | None = None,
    work_dir: Path | None = None,
    count: int = 4,
    seconds: float = 10.0,
    num_classes: int = 400,
    threads: int = 1,
    device: str = "cpu",
    out_json: Path | None = None,
    show: bool = True,
) -> list[WaitRow]:
    """Fraction of training-step time spent waiting for data (TSM paper Fig. 3b).

    For each clip length in `frames_list` (TSN sampling for 8 frames or fewer, dense stride 2
    above) and each loader worker count, runs `warmup` + `steps` real SGD steps of `model_name`
    on `batch` clips of `size` x `size` read by the real `DataLoader` (`source`: raw videos or
    prepared shards) on `device`, with `threads` intra-op threads on the CPU (loader workers
    get one each), and reports the share of the timed steps' time blocked on the next batch.
    """
    rows: list[WaitRow] = []
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with ExitStack() as stack:
            work = Path(work_dir or stack.enter_context(tempfile.TemporaryDirectory()))
            paths = (
                find_videos(Path(videos_dir), limit=64)
                if videos_dir is not None
                else _generated(work, count=count, seconds=seconds)
            )
            records = [VideoRecord(p, k % num_classes) for k, p in enumerate(paths)]
            entries = (
                prepare_shards(paths, work / "shards", quality=90) if source == "shards" else []
            )
            for frames in frames_list:
                spec = _wait_clip(frames, size)
                for workers in workers_list:
                    dataset = (
                        ShardClipDataset(entries, spec, train=True)
                        if source == "shards"
                        else VideoClipDataset(records, spec, train=True)
                    )
                    run = _WaitRun(model_name, batch, steps, warmup, num_classes, device)
                    rows.append(run.measure(dataset, frames=frames, workers=workers))
    finally:
        torch.set_num_threads(previous_threads)
    if out_json is not None:
        Path(out_json).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    if show:
        print(format_wait_table(rows))
    return rows


def _generated(work: Path, *, count: int, seconds: float) -> list[Path]:
    """`count` benchmark videos of `seconds` each with x264's default GOP, made under `work`."""
    generate = BenchVideoSpec(count=count, seconds=seconds, gops=(250,))
    return make_bench_videos(work / "videos", generate)["gop250"]


def _wait_clip(frames: int, size: int) -> ClipSpec:
    """A training clip of `frames` frames: TSN sampling up to 8 frames, dense stride 2 above."""
    sampling: Literal["uniform", "dense"] = "uniform" if frames <= 8 else "dense"
    return ClipSpec(frames=frames, sampling=sampling, stride=2, crop_size=size, flip=True)


@dataclass(frozen=True)
class _WaitRun:
    model_name: str
    batch: int
    steps: int
    warmup: int
    num_classes: int = 400
    device: str = "cpu"

    def measure(self, dataset: VideoClipDataset, *, frames: int, workers: int) -> WaitRow:
        """`warmup` + `steps` SGD steps; the timed steps' mean step time and time blocked."""
        torch.manual_seed(0)
        cfg = ModelConfig(name=self.model_name, num_classes=self.num_classes, frames=frames)
        device = torch.device(self.device)
        model = build_model(cfg).to(device).train()
        total = self.warmup + self.steps
        loader = DataLoader(
            dataset,
            batch_size=self.batch,
            sampler=_shuffled_passes(len(dataset), total * self.batch),
            num_workers=workers,
            collate_fn=collate,
            drop_last=True,
            pin_memory=device.type == "cuda",
            prefetch_factor=2 if workers else None,
        )
        # The trainer's step on the loader's batches: it times its own wait for the next batch.
        ctx = StepContext(
            model=model, optimizer=bench_sgd(model), prepare=ModelInput("rgb", 3), device=device
        )
        step_s: list[float] = []
        wait_s: list[float] = []
        batches = iter(loader)
        for _ in range(total):
            start = time.perf_counter()
            result = train_step(ctx, batches, accumulate=1, clips=self.batch, lr=WAIT_BENCH_LR)
            if device.type == "cuda":  # the step ends when its kernels do
                torch.cuda.synchronize(device)
            step_s.append(time.perf_counter() - start)
            wait_s.append(result.wait_s)
        del batches  # stops the workers
        timed_step, timed_wait = step_s[self.warmup :], wait_s[self.warmup :]
        return WaitRow(
            model=self.model_name,
            frames=frames,
            workers=workers,
            batch=self.batch,
            steps=len(timed_step),
            step_s=float(np.mean(timed_step)),
            wait_s=float(np.mean(timed_wait)),
            wait_fraction=sum(timed_wait) / sum(timed_step),
        )


def _shuffled_passes(size: int, length: int) -> list[int]:
    """`length` indices from shuffled passes over `size` items (a few steps may need more clips
    than a small benchmark set has videos)."""
    g = torch.Generator().manual_seed(0)
    order: list[int] = []
    while len(order) < length:
        order.extend(torch.randperm(size, generator=g).tolist())
    return order[:length]


def format_wait_table(rows: Sequence[WaitRow]) -> str:
    head = f"{'model':22s} {'frames':>6s} {'workers':>7s} {'batch':>5s} {'step s':>7s} "
    lines = [head + f"{'wait s':>7s} {'wait %':>7s}"]
    for r in rows:
        lines.append(
            f"{r.model:22s} {r.frames:6d} {r.workers:7d} {r.batch:5d} {r.step_s:7.2f} "
            f"{r.wait_s:7.2f} {100 * r.wait_fraction:7.1f}"
        )
    return "\n".join(lines)
