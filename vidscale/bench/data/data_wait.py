"""How much of a training step waits for data (TSM paper Fig. 3b): `run` trains a real model
for a few steps (the trainer's `step.run.train_step`, at the fast path training's `auto` would
choose for the model and clip, `train.builders.decide_model_fast_path`) with the real
`DataLoader` and measures
the fraction of step time blocked waiting for the next batch (data loading not hidden by
compute) for several clip lengths and loader worker counts."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader

from vidscale.bench import options
from vidscale.bench.data.bench_videos import BenchVideoSpec, find_videos, make_bench_videos
from vidscale.bench.data.dataload import prepare_shards
from vidscale.bench.options import option
from vidscale.bench.results import write_result
from vidscale.config import TrainConfig
from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import VideoClipDataset
from vidscale.data.inputs import ModelInput
from vidscale.data.loaders import loader_options
from vidscale.data.prepared.shard_dataset import ShardClipDataset
from vidscale.distributed.env import DistEnv
from vidscale.fastpath.host_memory import set_host_memory_retention
from vidscale.fastpath.settings import FastPath, apply_to_model, resolve_fast_path
from vidscale.fastpath.subject import ProbeShape
from vidscale.models.registry import ModelConfig, build_model
from vidscale.step.applied import AppliedSteps
from vidscale.step.fixed_batch import bench_sgd
from vidscale.step.run import StepContext, train_step
from vidscale.train.builders import decide_model_fast_path

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
    fast_path: str  # the setting training's `auto` chose for the model at this clip
    steps_applied: int  # of the warm-up and timed steps, those that applied their update


@dataclass(frozen=True)
class DataWaitConfig:
    """What `bench data-wait` runs (`run`): `warmup` + `steps` SGD steps of `model` on `batch`
    clips of `size`², for each clip length of `frames` (TSN sampling up to 8 frames, dense
    stride 2 above) and each loader worker count of `workers`, read from `source`: the videos
    under `videos` (None: `count` generated videos of `seconds` each, made under `work_dir`;
    None: a temporary directory), or shards prepared from them; `threads` intra-op threads.
    Each field is a flag of `bench data-wait` (`bench.options`)."""

    model: str = option("tsm_resnet18", help="registered model (see `vidscale models`)")
    batch: int = options.batch(2)
    frames: tuple[int, ...] = option((8, 16, 32), help="clip lengths", low=1)
    workers: tuple[int, ...] = option((0, 1, 2), help="loader processes", low=0)
    steps: int = options.steps(3)
    warmup: int = options.warmup(1)
    size: int = options.size(112)
    source: Literal["videos", "shards"] = option("videos", help="decode videos or read shards")
    videos: Path | None = option(None, help="videos to read (default: generated ones)")
    work_dir: Path | None = option(
        None, help="where generated videos go (default: a temporary one)"
    )
    count: int = option(4, help="videos to generate", low=1)
    seconds: float = option(10.0, help="length of generated videos in seconds", above=0)
    num_classes: int = options.num_classes()
    threads: int = option(1, help="intra-op CPU threads", low=1)


@dataclass(frozen=True)
class DataWaitResult:
    """One row per (clip length, worker count), in that order."""

    rows: tuple[WaitRow, ...]

    def to_json(self) -> list[dict[str, Any]]:
        """The JSON document `--out-json` writes: a list, one object per row (not an object
        as the other benches write: kept as it has always been written)."""
        return [asdict(r) for r in self.rows]


def run(
    config: DataWaitConfig, *, out_json: Path, progress: bool = False, device: str = "cpu"
) -> DataWaitResult:
    """Fraction of training-step time spent waiting for data (TSM paper Fig. 3b), written to
    `out_json` atomically.

    For each clip length and loader worker count of `config`, runs its real SGD steps on
    `device` with the real `DataLoader` (loader workers get one thread each) and reports the
    share of the timed steps' time blocked on the next batch. `progress` prints the table.
    """
    cfg = config
    rows: list[WaitRow] = []
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        with ExitStack() as stack:
            work = Path(cfg.work_dir or stack.enter_context(tempfile.TemporaryDirectory()))
            paths = (
                find_videos(Path(cfg.videos), limit=64)
                if cfg.videos is not None
                else _generated(work, count=cfg.count, seconds=cfg.seconds)
            )
            records = [VideoRecord(p, k % cfg.num_classes) for k, p in enumerate(paths)]
            shards = cfg.source == "shards"
            entries = prepare_shards(paths, work / "shards", quality=90) if shards else []
            wait = _WaitRun(
                cfg.model, cfg.batch, cfg.steps, cfg.warmup, cfg.size, cfg.num_classes, device
            )
            for frames in cfg.frames:
                spec = _wait_clip(frames, cfg.size)
                for workers in cfg.workers:
                    dataset = (
                        ShardClipDataset(entries, spec, train=True)
                        if shards
                        else VideoClipDataset(records, spec, train=True)
                    )
                    rows.append(wait.measure(dataset, frames=frames, workers=workers))
    finally:
        torch.set_num_threads(previous_threads)
    result = DataWaitResult(tuple(rows))
    write_result(out_json, result.to_json())
    if progress:
        print(format_wait_table(result.rows))
    return result


def bench_data_wait(
    model_name: str, *, out_json: Path, show: bool = True, **settings: Any
) -> DataWaitResult:
    """`run` under its earlier name and keywords (the record in docs/benchmarks.md was made
    with it): `frames_list`, `workers_list` and `videos_dir` are `DataWaitConfig`'s `frames`,
    `workers` and `videos`, the other `settings` its fields of the same names, and `device`
    `run`'s; `show` prints the table."""
    renamed = {"frames_list": "frames", "workers_list": "workers", "videos_dir": "videos"}
    device = settings.pop("device", "cpu")
    given = {renamed.get(k, k): v for k, v in settings.items()}
    for key in ("frames", "workers"):
        if key in given:
            given[key] = tuple(given[key])
    config = DataWaitConfig(model=model_name, **given)
    return run(config, out_json=out_json, progress=show, device=device)


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
    size: int
    num_classes: int = 400
    device: str = "cpu"

    def fast_path(self, frames: int) -> FastPath:
        """What training's `auto` decides for the model at this clip (cached, or probed in a
        child process), with the trainer's CPU host-memory policy on: the step is timed as
        the trainer would run it, so its share of time waiting for data is the trainer's."""
        device = torch.device(self.device)
        model = ModelConfig(name=self.model_name, num_classes=self.num_classes, frames=frames)
        shape = ProbeShape(self.batch, 3, frames, self.size, self.num_classes)
        train = TrainConfig()
        if device.type == "cpu":
            set_host_memory_retention(train.retain_host_memory)
        env = DistEnv(0, 0, 1, 1, device, backend="")  # this process alone: no group
        decision = decide_model_fast_path(model, shape, train, env=env)
        return resolve_fast_path(
            device,
            enabled=True,
            amp="auto",
            channels_last="auto",
            compile=False,
            auto=decision.candidate,
        )

    def loader(self, dataset: VideoClipDataset, *, workers: int, steps: int) -> DataLoader:
        """`steps` batches of shuffled passes over `dataset`, loaded as the trainer loads."""
        return DataLoader(
            dataset,
            batch_size=self.batch,
            sampler=_shuffled_passes(len(dataset), steps * self.batch),
            drop_last=True,
            **loader_options(workers=workers, pin_memory=self.device == "cuda"),
        )

    def measure(self, dataset: VideoClipDataset, *, frames: int, workers: int) -> WaitRow:
        """`warmup` + `steps` SGD steps at the trainer's fast path; the timed steps' mean step
        time and time blocked. Refused (`NothingTrained`) when none applied its update."""
        fast = self.fast_path(frames)
        torch.manual_seed(0)
        cfg = ModelConfig(name=self.model_name, num_classes=self.num_classes, frames=frames)
        device = torch.device(self.device)
        model = apply_to_model(build_model(cfg).to(device), fast).train()
        total = self.warmup + self.steps
        loader = self.loader(dataset, workers=workers, steps=total)
        # The trainer's step on the loader's batches: it times its own wait for the next batch.
        ctx = StepContext(
            model=model,
            optimizer=bench_sgd(model),
            prepare=ModelInput("rgb", 3),
            device=device,
            autocast=fast.autocast(),
        )
        step_s: list[float] = []
        wait_s: list[float] = []
        applied = AppliedSteps()
        batches = iter(loader)
        for _ in range(total):
            start = time.perf_counter()
            result = train_step(ctx, batches, accumulate=1, clips=self.batch, lr=WAIT_BENCH_LR)
            if device.type == "cuda":  # the step ends when its kernels do
                torch.cuda.synchronize(device)
            step_s.append(time.perf_counter() - start)
            wait_s.append(result.wait_s)
            applied.add(result)
        del batches  # stops the workers
        applied.check(f"{self.model_name} at {frames} frames, {workers} worker(s)")
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
            fast_path=fast.candidate.label,
            steps_applied=applied.applied,
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
