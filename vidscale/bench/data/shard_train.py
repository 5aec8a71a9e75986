"""`vidscale bench shard-train`: a model trained from prepared shards, fed by loader workers on
the host's CPU cores, as the trainer feeds it: uint8 clips collated by the workers, pinned
host memory, an asynchronous copy, normalisation on the device.

Runs `warmup` + `steps` training steps at a fixed setting and reports, over the timed steps:
clips/s, the share of step time blocked waiting for the next batch (each step ends with a
device synchronisation, so a wait is time the device had nothing to do), and the CPU the input
pipeline used: the workers' CPU-seconds per clip and the cores busy at this rate (the workers'
and the training process's CPU time over the wall time), from which the cores one device needs
at any rate follow (`cores_at`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from vidscale.bench.compute.models import check_trainable
from vidscale.bench.compute.train_step import StepShape, TrainStep, release
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import collate
from vidscale.data.inputs import ModelInput
from vidscale.data.prepared.prepare import open_prepared
from vidscale.data.prepared.shard_dataset import ShardClipDataset
from vidscale.fastpath import hardware
from vidscale.fastpath.settings import Candidate
from vidscale.models.registry import list_models


@dataclass(frozen=True)
class ShardTrainConfig:
    """What `bench_shard_train` runs: `model` on `batch` clips of `frames` x `size`² read from
    the prepared directory `root` by `workers` loader processes (0: `os.cpu_count() - 1`)."""

    root: Path
    model: str = "tsm_resnet50"
    batch: int = 32
    frames: int = 8
    size: int = 224
    workers: int = 0
    steps: int = 200
    warmup: int = 10
    setting: str = "bf16+cl"

    def validate(self) -> None:
        """Raise ValueError naming the first setting that cannot work."""
        checks = [
            (self.model in list_models(), f"unknown model {self.model!r}; see `vidscale models`"),
            (self.batch >= 1, "batch must be >= 1"),
            (self.frames >= 1, "frames must be >= 1"),
            (self.size >= 32, "size must be >= 32 (the trunk's total stride)"),
            (self.workers >= 0, "workers must be >= 0"),
            (self.steps >= 1, "steps must be >= 1"),
            (self.warmup >= 1, "warmup must be >= 1 (the workers start during it)"),
            (Path(self.root).is_dir(), f"{self.root} is not a directory"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        Candidate.from_label(self.setting)
        check_trainable(self.model, frames=self.frames, size=self.size, batch=self.batch)

    def loader_workers(self) -> int:
        return self.workers or max(1, (os.cpu_count() or 2) - 1)


def bench_shard_train(
    cfg: ShardTrainConfig, *, device: str | torch.device = "auto", out_json: Path | None = None
) -> dict[str, Any]:
    """The timed steps' throughput, data wait and CPU use; written to `out_json` if given."""
    cfg.validate()
    dev = hardware.resolve_device(device)
    try:
        entries = open_prepared(Path(cfg.root)).train
    except FileNotFoundError as err:
        raise ValueError(f"{cfg.root}: not a prepared directory ({err})") from err
    spec = ClipSpec(frames=cfg.frames, sampling="uniform", crop_size=cfg.size, flip=True)
    workers = cfg.loader_workers()
    total = cfg.warmup + cfg.steps
    loader = DataLoader(  # the trainer's loader settings (`train/builders.py`)
        ShardClipDataset(entries, spec, train=True, seed=0),
        batch_size=cfg.batch,
        sampler=_passes(len(entries), total * cfg.batch),
        num_workers=workers,
        collate_fn=collate,
        drop_last=True,
        pin_memory=dev.type == "cuda",
        prefetch_factor=4,
        persistent_workers=True,
    )
    shape = StepShape(cfg.model, cfg.batch, cfg.size, cfg.frames)
    step = TrainStep(shape, device=dev, setting=Candidate.from_label(cfg.setting))
    prepare = ModelInput.of(spec)
    batches = iter(loader)
    wait = started = cpu_main = cpu_workers = 0.0
    for k in range(total):
        if k == cfg.warmup:  # the timed stretch starts with the workers already running
            wait = 0.0
            started, cpu_main, cpu_workers = time.perf_counter(), time.process_time(), _child_cpu()
        start = time.perf_counter()
        batch = next(batches)
        wait += time.perf_counter() - start
        clips = prepare.normalize(prepare.take(batch["inputs"], dev))
        step.run(clips, batch["label"].to(dev, non_blocking=True))
        hardware.synchronize(dev)
    busy = time.perf_counter() - started
    main_s, workers_s = time.process_time() - cpu_main, _child_cpu() - cpu_workers
    del batches, step
    release(dev)
    clips_timed = cfg.steps * cfg.batch
    result = {
        "hardware": hardware.describe(dev),
        "settings": asdict(cfg) | {"root": str(cfg.root), "workers": workers},
        "videos": len(entries),
        "clips_per_s": clips_timed / busy,
        "step_s": busy / cfg.steps,
        "data_wait_fraction": wait / busy,
        "worker_cpu_s_per_clip": workers_s / clips_timed,
        "worker_cores_busy": workers_s / busy,
        "main_cores_busy": main_s / busy,
    }
    if out_json is not None:
        Path(out_json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def cores_at(result: dict[str, Any], clips_per_s: float) -> float:
    """The cores one device needs to be fed `clips_per_s`: the workers' CPU per clip at that
    rate, plus the training process as measured."""
    return float(result["worker_cpu_s_per_clip"] * clips_per_s + result["main_cores_busy"])


def _passes(size: int, length: int) -> list[int]:
    """`length` indices from shuffled passes over `size` items (a small prepared set serves
    a few hundred steps)."""
    g = torch.Generator().manual_seed(0)
    order: list[int] = []
    while len(order) < length:
        order.extend(torch.randperm(size, generator=g).tolist())
    return order[:length]


def _child_cpu() -> float:
    """CPU-seconds (user + system) of this process's live children (the loader workers), from
    /proc; 0 where there is no /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in _children():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14, 15)
    return total / ticks


def _children() -> Iterator[int]:
    tasks = Path(f"/proc/{os.getpid()}/task")
    if not tasks.is_dir():
        return
    for task in tasks.iterdir():
        try:
            yield from (int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
