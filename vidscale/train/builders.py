"""Small `build_*` functions that turn a `RunConfig` into the pieces the loop uses."""

from __future__ import annotations

import functools
import json
import multiprocessing as mp
import os
import signal
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from vidscale.config import ConfigError, RunConfig
from vidscale.data.annotations import read_annotations, read_class_names
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.inputs import ModelInput
from vidscale.data.layouts import read_layout
from vidscale.data.prepare import FLOW_DIR, open_prepared
from vidscale.data.samplers import (
    BatchRequest,
    ExactEvalSampler,
    RequestBatchSampler,
    RequestCycle,
    TrainSampler,
)
from vidscale.data.shard_dataset import ShardClipDataset, StreamingShardDataset
from vidscale.data.sources import FlowSettings
from vidscale.distributed.env import DistEnv
from vidscale.fastpath.cache import cache_file
from vidscale.fastpath.host_memory import retain_freed_host_memory
from vidscale.fastpath.probe import (
    RECORD_KEY,
    FastPathDecision,
    ProbeShape,
    decide,
    settled,
)
from vidscale.fastpath.settings import FastPath, apply_to_model, resolve_fast_path
from vidscale.models.registry import build_model as build_registered_model
from vidscale.train.init_from import describe, initialise_from
from vidscale.train.run_ref import resolve_path
from vidscale.train.timeline import Phase


@dataclass(frozen=True)
class DataSplits:
    """Class names and the train/val items: `VideoRecord`s, or `ShardEntry`s when prepared."""

    classes: list[str]
    train: list[Any]
    val: list[Any]


@dataclass
class TrainData:
    """The training loader and how to position it at (epoch, step in epoch) of a phase.

    The batches of an epoch follow its phase (`train.timeline.Phase`: batch sizes and clip shapes
    per step): through the `RequestBatchSampler`, or, for a streamed dataset, which batches in
    its workers, through the phase's `RequestCycle`.
    """

    loader: DataLoader
    dataset: VideoClipDataset | StreamingShardDataset
    sampler: TrainSampler | None
    batches: RequestBatchSampler | None = None

    def set_epoch(self, epoch: int, *, step_in_epoch: int, phase: Phase, base: ClipSpec) -> None:
        if isinstance(self.dataset, StreamingShardDataset):
            self.dataset.set_epoch(
                epoch,
                start_batches=step_in_epoch * phase.accumulate,
                requests=phase.request_cycle(base),
            )
            return
        assert self.sampler is not None and self.batches is not None
        self.sampler.set_epoch(epoch, start=phase.clips_before(step_in_epoch))
        self.dataset.set_epoch(epoch)
        self.batches.set_requests(phase.requests(step_in_epoch, base))

    def base_shape_batches(self, epoch: int, *, batches: int, size: int) -> DataLoader:
        """The loader set to give `batches` batches of `size` clips of the recipe's own clip
        shape, from the start of `epoch`'s order (precise BN); `set_epoch` puts it back on
        the training schedule."""
        if isinstance(self.dataset, StreamingShardDataset):
            requests = RequestCycle((BatchRequest(size),), batches)
            self.dataset.set_epoch(epoch, start_batches=0, requests=requests)
            return self.loader
        assert self.sampler is not None and self.batches is not None
        self.sampler.set_epoch(epoch, start=0)
        self.dataset.set_epoch(epoch)
        self.batches.set_requests([BatchRequest(size)] * batches)
        return self.loader


def load_splits(cfg: RunConfig) -> DataSplits:
    """Read the class list and both splits; errors name the file and line."""
    if not cfg.data.root:
        raise ConfigError("data.root is not set (pass --data DIR or --set data.root=DIR)")
    root = Path(cfg.data.root)
    if not root.is_dir():
        raise ConfigError(f"data.root: {root} is not a directory")
    if cfg.data.source != "videos":
        try:
            prepared = open_prepared(root, modality=cfg.data.train_clip.modality)
        except FileNotFoundError as err:
            raise ConfigError(f"data.source={cfg.data.source}: {err}") from err
        return _checked(cfg, prepared.classes, prepared.train, prepared.val)
    if cfg.data.layout != "generic":
        splits = read_layout(
            cfg.data.layout, root, split=cfg.data.split, skip_missing=cfg.data.skip_missing
        )
        for path, reason in splits.missing:
            warnings.warn(f"{reason}: {path}", stacklevel=2)
        return _checked(cfg, splits.classes, splits.train, splits.val)
    classes = read_class_names(resolve_path(cfg.data.root, cfg.data.classes))
    train = read_annotations(
        resolve_path(cfg.data.root, cfg.data.train_list),
        classes=classes,
        skip_missing=cfg.data.skip_missing,
    )
    val = read_annotations(
        resolve_path(cfg.data.root, cfg.data.val_list),
        classes=classes,
        skip_missing=cfg.data.skip_missing,
    )
    return _checked(cfg, classes, train, val)


def _checked(
    cfg: RunConfig, classes: list[str], train: Sequence[Any], val: Sequence[Any]
) -> DataSplits:
    for name, items in (("training", train), ("validation", val)):
        if not items:
            raise ConfigError(f"data.root={cfg.data.root}: the {name} split has no videos")
    return DataSplits(classes=classes, train=list(train), val=list(val))


def resolve_num_classes(cfg: RunConfig, classes: list[str]) -> RunConfig:
    """`model.num_classes = 0` means "from the class list"; a mismatch is a config error."""
    if cfg.model.num_classes == 0:
        return replace(cfg, model=replace(cfg.model, num_classes=len(classes)))
    if cfg.model.num_classes != len(classes):
        raise ConfigError(
            f"model.num_classes={cfg.model.num_classes} but {cfg.data.classes} lists "
            f"{len(classes)} classes (set model.num_classes=0 to take it from the list)"
        )
    return cfg


def set_threads(cfg: RunConfig, env: DistEnv) -> None:
    """Share the cores among the processes of one node (torch defaults to all of them each)."""
    if env.device.type != "cpu":
        return
    threads = cfg.train.threads or max(1, (os.cpu_count() or 1) // env.local_world_size)
    torch.set_num_threads(threads)


def retain_host_memory(cfg: RunConfig, env: DistEnv) -> bool:
    """Keep freed host memory mapped for reuse where the run's CPU fast path asks for it
    (`host_memory`: CPU steps otherwise page-fault their activation buffers back in every
    step); True when it is in effect. Call it before the model and the loader workers
    allocate, and before the fast-path probe, which must time steps as training runs them."""
    t = cfg.train
    wanted = env.device.type == "cpu" and t.fast_path and t.retain_host_memory
    return wanted and retain_freed_host_memory()


def fast_path(cfg: RunConfig, env: DistEnv, *, decision: FastPathDecision | None) -> FastPath:
    """The run's fast path: `decision` (`decide_fast_path`, or a run's recorded one) for the
    settings left at "auto"; None only where nothing was decided (see `resolve_fast_path`)."""
    t = cfg.train
    return resolve_fast_path(
        env.device,
        enabled=t.fast_path,
        amp=t.amp,
        channels_last=t.channels_last,
        compile=t.compile,
        auto=None if decision is None else decision.candidate,
    )


def decide_fast_path(
    cfg: RunConfig, env: DistEnv, *, checkpoint: dict[str, Any] | None, micro_batch: int
) -> FastPathDecision:
    """`train.amp` / `train.channels_last` for this run on every rank (a collective): as set,
    as the resumed `checkpoint` recorded, cached, or probed at the recipe's base shape with
    `micro_batch` clips per process (`fast_path_probe.decide`). Call it with the process's
    threads and host-memory retention already set: the probe times what training will run."""
    t, spec = cfg.train, cfg.data.train_clip
    probed = replace(cfg.model, pretrained=None, init_from="")  # timing needs no weights
    shape = ProbeShape(micro_batch, spec.channels, spec.frames, spec.crop_size, probed.num_classes)
    knobs = {k: v for k, v in asdict(probed).items() if k not in ("pretrained", "init_from")}
    log = _main_printer(env)
    if cfg.multigrid.enabled and checkpoint is None:
        log("fast path: multigrid decides once, at the base shape; every phase uses it")
    return decide(
        env.device,
        enabled=t.fast_path,
        amp=t.amp,
        channels_last=t.channels_last,
        build=functools.partial(build_registered_model, probed),  # pickles: the probe's child
        shape=shape,
        key_fields={
            "model": ",".join(f"{k}={v}" for k, v in sorted(knobs.items())),
            "processes": env.local_world_size,
            "host_memory": t.retain_host_memory and env.device.type == "cpu",
        },
        cache=cache_file(t.fast_path_cache),
        checkpoint=checkpoint,
        is_main=env.is_main,
        host_memory=t.retain_host_memory and env.device.type == "cpu",
        log=log,
    )


def recorded_fast_path(cfg: RunConfig, env: DistEnv, checkpoint: Path) -> FastPath:
    """The fast path a run trained `checkpoint` with (its recorded decision; the hardware rule
    for a checkpoint from before decisions were recorded), explicit settings of `cfg` winning.
    Reads only the record: the file is memory-mapped, its tensors are not loaded."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
    t = cfg.train
    decision = settled(
        env.device,
        enabled=t.fast_path,
        amp=t.amp,
        channels_last=t.channels_last,
        checkpoint={k: v for k, v in state.items() if k == RECORD_KEY},
    )
    return fast_path(cfg, env, decision=decision)


def _main_printer(env: DistEnv) -> Callable[[str], None]:
    def log(message: str) -> None:
        if env.is_main:
            print(f"vidscale: {message}", flush=True)

    return log


def build_model(cfg: RunConfig, env: DistEnv, fast: FastPath, *, fresh: bool = False) -> nn.Module:
    """The run's model on its device with the fast path applied. A `fresh` run (no checkpoint
    of its own to resume) starts from `model.init_from` when set: another run's weights,
    adapted (`models.transfer`: cross-modality conv1, a new head for another class count)."""
    model = build_registered_model(cfg.model)
    if fresh and cfg.model.init_from:
        try:
            report = initialise_from(model, cfg.model.init_from)
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError(f"model.init_from: {err}") from err
        if env.is_main:
            print(f"vidscale: {describe(report)}", flush=True)
    return apply_to_model(model.to(env.device), fast)


def resolve_data(cfg: RunConfig, classes: list[str]) -> RunConfig:
    """The config with what the data determines: the class count (`resolve_num_classes`) and,
    for prepared optical flow, the flow settings it was prepared with (so the run's saved
    config says how to compute its input from a raw video)."""
    cfg = resolve_num_classes(cfg, classes)
    if cfg.data.source == "videos" or cfg.data.train_clip.modality != "flow":
        return cfg
    path = Path(cfg.data.root) / FLOW_DIR / "prepare_options.json"
    try:
        options = json.loads(path.read_text())["options"]
        settings = FlowSettings(
            method=options["method"],
            short_side=int(options["short_side"]),
            bound=float(options["bound"]),
        )
    except (OSError, KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"data.root: cannot read the flow options in {path}: {err}") from err
    return replace(cfg, data=replace(cfg.data, flow=settings))


def model_input(cfg: RunConfig) -> ModelInput:
    """The named input the run's model takes (its modality) and its normalisation."""
    return ModelInput.of(cfg.data.train_clip)


def worker_context(cfg: RunConfig) -> BaseContext | None:
    """The multiprocessing context loader workers start from (`data.worker_start`).

    forkserver and spawn workers receive the dataset pickled; their shared epoch travels as a
    handle to the same memory. A forkserver is told to import the data modules once, so each
    worker it forks starts with them loaded.
    """
    if cfg.data.workers == 0 or cfg.data.worker_start == "auto":
        return None
    context = mp.get_context(cfg.data.worker_start)
    if cfg.data.worker_start == "forkserver":
        context.set_forkserver_preload(["vidscale.data.dataset", "vidscale.data.shard_dataset"])
    return context


def ignore_stop_signals(worker_id: int) -> None:
    """Loader workers leave SIGTERM / SIGINT / SIGUSR1 to the training process, which
    checkpoints and then ends them: SLURM and Ctrl-C signal every process of the job, and a
    worker dying first would fail the step that is needed to reach the checkpoint."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)


def build_train_data(
    cfg: RunConfig, env: DistEnv, items: list[Any], *, micro_batch: int
) -> TrainData:
    """The training loader; `micro_batch` is a streamed dataset's batch until the first
    `TrainData.set_epoch` gives it the epoch's requests."""
    spec, seed, bs = cfg.data.train_clip, cfg.train.seed, micro_batch
    common: dict[str, Any] = {
        "num_workers": cfg.data.workers,
        "collate_fn": collate,
        "pin_memory": env.device.type == "cuda",
        # Workers start once per run: no per-epoch start-up, and no fork while a finished
        # loader's threads are exiting (a child forked then can deadlock in CPython 3.11).
        # The datasets share their epoch with the workers (`data/epoch_state.py`).
        "persistent_workers": cfg.data.workers > 0,
        "multiprocessing_context": worker_context(cfg),
        "prefetch_factor": 4 if cfg.data.workers > 0 else None,
        "worker_init_fn": ignore_stop_signals,
    }
    if cfg.data.source == "stream":
        stream = StreamingShardDataset(
            items,
            spec,
            batch_size=bs,
            rank=env.rank,
            world_size=env.world_size,
            seed=seed,
            shuffle_buffer=cfg.data.shuffle_buffer,
            shuffle_initial=cfg.data.shuffle_initial,
        )
        loader = DataLoader(stream, batch_size=None, **common)  # it yields whole batches
        return TrainData(loader, stream, None)
    dataset = (
        ShardClipDataset(items, spec, train=True, seed=seed)
        if cfg.data.source == "shards"
        else VideoClipDataset(items, spec, train=True, seed=seed, flow=cfg.data.flow)
    )
    sampler = TrainSampler(len(dataset), rank=env.rank, world_size=env.world_size, seed=seed)
    batches = RequestBatchSampler(sampler)
    loader = DataLoader(dataset, batch_sampler=batches, **common)
    return TrainData(loader, dataset, sampler, batches)


def build_eval_dataset(cfg: RunConfig, items: list[Any]) -> VideoClipDataset:
    """The validation items as the run evaluates them (`data.eval_clip`, no substitution)."""
    spec = cfg.data.eval_clip
    if cfg.data.source == "videos":
        return VideoClipDataset(items, spec, train=False, seed=cfg.train.seed, flow=cfg.data.flow)
    return ShardClipDataset(items, spec, train=False, seed=cfg.train.seed)


def build_eval_loader(cfg: RunConfig, env: DistEnv, items: list[Any]) -> DataLoader:
    dataset = build_eval_dataset(cfg, items)
    sampler = ExactEvalSampler(len(dataset), rank=env.rank, world_size=env.world_size)
    return DataLoader(
        dataset,
        batch_size=cfg.data.eval_batch_size or cfg.data.batch_size,
        sampler=sampler,
        num_workers=cfg.data.workers,
        collate_fn=collate,
        pin_memory=env.device.type == "cuda",
        drop_last=False,
        persistent_workers=cfg.data.workers > 0,
        multiprocessing_context=worker_context(cfg),
        worker_init_fn=ignore_stop_signals,
    )
