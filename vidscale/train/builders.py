"""Small `build_*` functions that turn a `RunConfig` into the pieces the loop uses.

The data side (splits, loaders per `data.source`) is built in `vidscale.data` from the data
config; the functions here hand it the run's seed and this process's place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from torch import nn
from torch.utils.data import DataLoader

from vidscale.config import ConfigError, RunConfig, TrainConfig
from vidscale.data.dataset import VideoClipDataset
from vidscale.data.inputs import ModelInput
from vidscale.data.loaders import Placement, TrainData, eval_dataset, eval_loader, train_data
from vidscale.distributed.env import DistEnv
from vidscale.fastpath.cache import cache_file
from vidscale.fastpath.host_memory import retain_freed_host_memory
from vidscale.fastpath.probe import FastPathDecision, ProbeShape, decide, settled
from vidscale.fastpath.settings import FastPath, apply_to_model, resolve_fast_path
from vidscale.models.registry import ModelConfig
from vidscale.models.registry import build_model as build_registered_model
from vidscale.run.record import RunRecord, read_record
from vidscale.train.init_from import describe, initialise_from, normalisation_warning


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
    cfg: RunConfig, env: DistEnv, *, checkpoint: RunRecord | None, micro_batch: int
) -> FastPathDecision:
    """`train.amp` / `train.channels_last` for this run on every rank (a collective): as set,
    as the resumed `checkpoint` recorded (its record, `record.RunRecord`), cached, or probed at
    the recipe's base shape with `micro_batch` clips per process (`fastpath.probe.decide`).
    Call it with the process's threads and host-memory retention already set: the probe times
    what training will run."""
    spec = cfg.data.train_clip
    log = _main_printer(env)
    if cfg.multigrid.enabled and checkpoint is None:
        log("fast path: multigrid decides once, at the base shape; every phase uses it")
    shape = ProbeShape(
        micro_batch, spec.channels, spec.frames, spec.crop_size, cfg.model.num_classes
    )
    return decide_model_fast_path(
        cfg.model, shape, cfg.train, env=env, checkpoint=checkpoint, log=log
    )


def decide_model_fast_path(
    model: ModelConfig,
    shape: ProbeShape,
    train: TrainConfig,
    *,
    env: DistEnv,
    checkpoint: RunRecord | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> FastPathDecision:
    """What training decides for `model` at `shape` under `train`'s fast-path settings, with
    `env`'s processes (a collective): the trainer's decision, and a bench's that measures what
    the trainer would run (`bench data-wait`). The same cache key, so either reuses the
    other's measurement."""
    t = train
    probed = replace(model, pretrained=None, init_from="")  # timing needs no weights
    knobs = {k: v for k, v in asdict(probed).items() if k not in ("pretrained", "init_from")}
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
    Reads only the record (`record.read_record`): the file is memory-mapped, its tensors are
    not loaded. A file that does not load is an `UnreadableCheckpoint` naming it."""
    t = cfg.train
    decision = settled(
        env.device,
        enabled=t.fast_path,
        amp=t.amp,
        channels_last=t.channels_last,
        checkpoint=read_record(checkpoint),
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
            rgb = cfg.data.train_clip.modality != "flow"
            note = rgb and normalisation_warning(
                cfg.model.init_from, mean=cfg.data.mean, std=cfg.data.std
            )
            if note:
                print(f"vidscale: {note}", flush=True)
    return apply_to_model(model.to(env.device), fast)


def model_input(cfg: RunConfig) -> ModelInput:
    """The named input the run's model takes (its modality) and its normalisation."""
    return ModelInput.of(cfg.data.train_clip, cfg.data)


def placement(env: DistEnv) -> Placement:
    """Where this process's loaders run: its rank, the world size, pinned batches on CUDA."""
    return Placement(env.rank, env.world_size, pin_memory=env.device.type == "cuda")


def build_train_data(
    cfg: RunConfig, env: DistEnv, items: list[Any], *, micro_batch: int
) -> TrainData:
    """The training loader (`data.loaders.train_data`); `cfg` has its class count resolved
    (`load_data`): multi-label items carry targets that wide."""
    return train_data(
        cfg.data,
        items,
        seed=cfg.train.seed,
        micro_batch=micro_batch,
        place=placement(env),
        num_classes=cfg.model.num_classes,
    )


def build_eval_dataset(cfg: RunConfig, items: list[Any]) -> VideoClipDataset:
    """The validation items as the run evaluates them (`data.loaders.eval_dataset`)."""
    return eval_dataset(cfg.data, items, seed=cfg.train.seed, num_classes=cfg.model.num_classes)


def build_eval_loader(cfg: RunConfig, env: DistEnv, items: list[Any]) -> DataLoader:
    return eval_loader(
        cfg.data,
        items,
        seed=cfg.train.seed,
        place=placement(env),
        num_classes=cfg.model.num_classes,
    )
