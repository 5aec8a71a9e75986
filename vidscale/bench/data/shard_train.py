"""`vidscale bench shard-train`: a model trained from prepared shards, fed by loader workers on
the host's CPU cores, as the trainer feeds it: uint8 clips collated by the workers, pinned
host memory, an asynchronous copy, normalisation on the device.

Runs `warmup` + `steps` training steps at a fixed setting and reports, over the timed steps:
clips/s, the share of step time blocked waiting for the next batch (each step ends with a
device synchronisation, so a wait is time the device had nothing to do), and the CPU the input
pipeline used: the workers' CPU-seconds per clip and the cores busy at this rate (the workers'
and the training process's CPU time over the wall time), from which the cores one device needs
at any rate follow (`ShardTrainResult.cores_at`).

`run(ShardTrainConfig, *, out_json, progress, device)` returns a `ShardTrainResult`, whose
`to_dict()` is the JSON it writes and which `ShardTrainResult.read` parses back (`bench
gpu-report` reads it so).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from vidscale.bench import options
from vidscale.bench.compute.train_step import StepShape, check_trainable, release, train_subject
from vidscale.bench.options import option
from vidscale.bench.results import (
    DEFAULT_SOURCE,
    HostInfo,
    fields_of,
    read_json,
    write_result,
)
from vidscale.data.clip import ClipSpec
from vidscale.data.inputs import ModelInput
from vidscale.data.loaders import loader_options
from vidscale.data.prepared.prepare import open_prepared
from vidscale.data.prepared.shard_dataset import ShardClipDataset
from vidscale.errors import InputError
from vidscale.fastpath import hardware
from vidscale.fastpath.settings import Candidate
from vidscale.models.registry import list_models

WHAT = "`vidscale bench shard-train`"


@dataclass(frozen=True)
class ShardTrainConfig:
    """What `bench shard-train` runs (`run`): `model` on `batch` clips of `frames` x `size`² read from
    the prepared directory `root` by `workers` loader processes (0: `os.cpu_count() - 1`).
    Each field but `root` (the positional PREPARED) is a flag (`bench.options`)."""

    root: Path
    model: str = option("tsm_resnet50", help="registered model (see `vidscale models`)")
    batch: int = options.batch(32)
    frames: int = options.frames(8, own=False)
    size: int = options.size()
    workers: int = option(0, help="loader processes (0: every core but one)", low=0)
    steps: int = options.steps(200)
    warmup: int = options.warmup(10, low=1, help="untimed steps first (>= 1: workers start)")
    setting: str = options.fast_path()

    def validate(self) -> None:
        """Raise `InputError` naming the first flag or setting that cannot work."""
        options.check_options(self)
        if self.model not in list_models():
            raise InputError(f"--model: unknown model {self.model!r}; see `vidscale models`")
        if not Path(self.root).is_dir():
            raise InputError(f"{self.root} is not a directory")
        check_trainable(self.model, frames=self.frames, size=self.size, batch=self.batch)

    def loader_workers(self) -> int:
        return self.workers or max(1, (os.cpu_count() or 2) - 1)


_SETTING_TYPES = {
    "model": "text",
    "batch": "integer",
    "frames": "integer",
    "size": "integer",
    "workers": "integer",
    "steps": "integer",
    "warmup": "integer",
    "setting": "text",
}


@dataclass(frozen=True)
class ShardTrainResult:
    """What `bench shard-train` measured (its `--out-json`, read back by `bench gpu-report`):
    the device, the settings (`workers` as run: never 0), the prepared videos read, and over
    the timed steps clips/s, the mean step, the share of it blocked waiting for data, the
    workers' CPU-seconds per clip and cores busy, and the training process's cores busy."""

    hardware: HostInfo
    settings: ShardTrainConfig
    videos: int
    clips_per_s: float
    step_s: float
    data_wait_fraction: float
    worker_cpu_s_per_clip: float
    worker_cores_busy: float
    main_cores_busy: float

    def cores_at(self, clips_per_s: float) -> float:
        """The cores one device needs to be fed `clips_per_s`: the workers' CPU per clip at
        that rate, plus the training process as measured."""
        return float(self.worker_cpu_s_per_clip * clips_per_s + self.main_cores_busy)

    def to_dict(self) -> dict[str, Any]:
        out = {k.name: getattr(self, k.name) for k in dataclasses.fields(self)}
        settings = asdict(self.settings) | {"root": str(self.settings.root)}
        return out | {"hardware": self.hardware.to_dict(), "settings": settings}

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, source: str = DEFAULT_SOURCE
    ) -> ShardTrainResult:
        """Parse `to_dict()`'s document; `InputError` naming `source` and the key at fault."""
        f = fields_of(data, source=source, what=WHAT)
        s = f.obj("settings")
        given = {k: getattr(s, kind)(k) for k, kind in _SETTING_TYPES.items()}
        numbers = ("clips_per_s", "step_s", "data_wait_fraction", "worker_cpu_s_per_clip")
        return cls(
            hardware=HostInfo.from_fields(f.obj("hardware")),
            settings=ShardTrainConfig(root=Path(s.text("root")), **given),
            videos=f.integer("videos"),
            **{k: f.number(k) for k in (*numbers, "worker_cores_busy", "main_cores_busy")},
        )

    @classmethod
    def read(cls, path: Path) -> ShardTrainResult:
        """The result in the JSON file at `path`; `InputError` naming the file and the key."""
        return cls.from_dict(read_json(path, what=WHAT).data, source=str(path))


def run(
    config: ShardTrainConfig,
    *,
    out_json: Path,
    progress: bool = False,
    device: str | torch.device = "auto",
) -> ShardTrainResult:
    """The timed steps' throughput, data wait and CPU use on `device`, written to `out_json`
    atomically. Raises `InputError` for a config that cannot work or a directory that is not
    prepared. `progress` announces the timed stretch on stderr."""
    cfg = config
    cfg.validate()
    dev = hardware.resolve_device(device)
    try:
        entries = open_prepared(Path(cfg.root)).train
    except FileNotFoundError as err:
        raise InputError(f"{cfg.root}: not a prepared directory ({err})") from err
    spec = ClipSpec(frames=cfg.frames, sampling="uniform", crop_size=cfg.size, flip=True)
    workers = cfg.loader_workers()
    loader = DataLoader(  # the trainer's loader settings (`data.loaders.loader_options`)
        ShardClipDataset(entries, spec, train=True, seed=0),
        batch_size=cfg.batch,
        sampler=_passes(len(entries), (cfg.warmup + cfg.steps) * cfg.batch),
        drop_last=True,
        **loader_options(workers=workers, pin_memory=dev.type == "cuda"),
    )
    if progress:
        print(f"bench shard-train: {cfg.model}, {workers} loader workers", file=sys.stderr)
    busy, wait, main_s, workers_s = _timed_steps(cfg, spec, loader, dev)
    clips_timed = cfg.steps * cfg.batch
    result = ShardTrainResult(
        hardware=HostInfo.of(hardware.describe(dev)),
        settings=replace(cfg, root=Path(cfg.root), workers=workers),
        videos=len(entries),
        clips_per_s=clips_timed / busy,
        step_s=busy / cfg.steps,
        data_wait_fraction=wait / busy,
        worker_cpu_s_per_clip=workers_s / clips_timed,
        worker_cores_busy=workers_s / busy,
        main_cores_busy=main_s / busy,
    )
    write_result(out_json, result.to_dict())
    return result


def _timed_steps(
    cfg: ShardTrainConfig, spec: ClipSpec, loader: DataLoader[Any], dev: torch.device
) -> tuple[float, float, float, float]:
    """`warmup` + `steps` training steps on the loader's batches; over the timed ones: the
    wall seconds, the seconds blocked on the next batch, and the CPU-seconds of this process
    and of the loader workers."""
    shape = StepShape(cfg.model, cfg.batch, cfg.size, cfg.frames)
    step = train_subject(shape, device=dev, setting=Candidate.from_label(cfg.setting))
    prepare = ModelInput.of(spec)
    batches = iter(loader)
    wait = started = cpu_main = cpu_workers = 0.0
    for k in range(cfg.warmup + cfg.steps):
        if k == cfg.warmup:  # the timed stretch starts with the workers already running
            wait = 0.0
            started, cpu_main, cpu_workers = time.perf_counter(), time.process_time(), _child_cpu()
        start = time.perf_counter()
        batch = next(batches)
        wait += time.perf_counter() - start
        clips = prepare.normalize(prepare.take(batch["inputs"], dev))
        step.on(clips, batch["label"].to(dev, non_blocking=True))
        hardware.synchronize(dev)
    busy = time.perf_counter() - started
    main_s, workers_s = time.process_time() - cpu_main, _child_cpu() - cpu_workers
    applied = step.applied
    del batches, step
    release(dev)
    applied.check(f"{cfg.model} on {cfg.root} ({cfg.setting})")
    return busy, wait, main_s, workers_s


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
