"""The training and evaluation loaders of a run, per `data.source`, from the data config.

- videos: `VideoClipDataset` decodes the listed files (random access);
- shards: `ShardClipDataset` reads a prepared directory by random access;
- stream: `StreamingShardDataset` reads it shard by shard and batches in its workers.

The caller gives what the data config does not hold: the seed, this process's rank among
`world_size`, whether batches are pinned for a CUDA device, and for multi-label data
(`data.multi_label`) `num_classes`, the width of the batches' `"targets"` (N, K).
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import signal
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any, Literal, Protocol

from torch.utils.data import DataLoader

from vidscale.data.clip import ClipSpec
from vidscale.data.data_config import DataConfig
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.prepared.shard_dataset import ShardClipDataset, StreamingShardDataset
from vidscale.data.samplers import (
    BatchRequest,
    ExactEvalSampler,
    RequestBatchSampler,
    RequestCycle,
    TrainSampler,
)

# A loader worker writes every thread's Python stack to its stderr when it receives this.
STACKS_SIGNAL = signal.SIGUSR2


@dataclass(frozen=True)
class Placement:
    """Where the loader runs: this process's `rank` of `world_size`, and whether batches are
    pinned for a CUDA device."""

    rank: int = 0
    world_size: int = 1
    pin_memory: bool = False


class EpochSchedule(Protocol):
    """What `TrainData.set_epoch` reads of a phase of the run (`Phase` of the training
    timeline): its batches per step, and the batch requests from a step on."""

    @property
    def accumulate(self) -> int: ...

    def clips_before(self, step_in_epoch: int) -> int: ...

    def requests(self, step_in_epoch: int, base: ClipSpec) -> list[BatchRequest]: ...

    def request_cycle(self, base: ClipSpec) -> RequestCycle: ...


@dataclass
class TrainData:
    """The training loader and how to position it at (epoch, step in epoch) of a phase.

    The batches of an epoch follow its phase (batch sizes and clip shapes per step): through
    the `RequestBatchSampler`, or, for a streamed dataset, which batches in its workers,
    through the phase's `RequestCycle`.
    """

    loader: DataLoader
    dataset: VideoClipDataset | StreamingShardDataset
    sampler: TrainSampler | None
    batches: RequestBatchSampler | None = None

    def set_epoch(
        self, epoch: int, *, step_in_epoch: int, phase: EpochSchedule, base: ClipSpec
    ) -> None:
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

    def close(self) -> None:
        """End the loader's worker processes now (`stop_workers`)."""
        stop_workers(self.loader)

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


def clip_dataset(
    data: DataConfig,
    items: list[Any],
    spec: ClipSpec,
    *,
    train: bool,
    seed: int,
    num_classes: int = 0,
) -> VideoClipDataset:
    """A random-access dataset of `items` sampled by `spec`: decoded videos, or prepared
    shards for `data.source` shards and stream (a streamed run evaluates by random access)."""
    limit = data.unreadable_limit()
    if data.source == "videos":
        return VideoClipDataset(
            items,
            spec,
            train=train,
            seed=seed,
            unreadable=limit,
            flow=data.flow,
            num_classes=num_classes,
        )
    return ShardClipDataset(
        items, spec, train=train, seed=seed, unreadable=limit, num_classes=num_classes
    )


def train_data(
    data: DataConfig,
    items: list[Any],
    *,
    seed: int,
    micro_batch: int,
    place: Placement,
    num_classes: int = 0,
) -> TrainData:
    """The training loader; `micro_batch` is a streamed dataset's batch until the first
    `TrainData.set_epoch` gives it the epoch's requests."""
    common = loader_options(
        workers=data.workers, pin_memory=place.pin_memory, worker_start=data.worker_start
    )
    if data.source == "stream":
        stream = StreamingShardDataset(
            items,
            data.train_clip,
            batch_size=micro_batch,
            rank=place.rank,
            world_size=place.world_size,
            seed=seed,
            shuffle_buffer=data.shuffle_buffer,
            shuffle_initial=data.shuffle_initial,
            num_classes=num_classes,
        )
        loader = DataLoader(stream, batch_size=None, **common)  # it yields whole batches
        return TrainData(loader, stream, None)
    dataset = clip_dataset(
        data, items, data.train_clip, train=True, seed=seed, num_classes=num_classes
    )
    sampler = TrainSampler(len(dataset), rank=place.rank, world_size=place.world_size, seed=seed)
    batches = RequestBatchSampler(sampler)
    loader = DataLoader(dataset, batch_sampler=batches, **common)
    return TrainData(loader, dataset, sampler, batches)


def eval_dataset(
    data: DataConfig, items: list[Any], *, seed: int, num_classes: int = 0
) -> VideoClipDataset:
    """The validation items as the run evaluates them (`data.eval_clip`, no substitution)."""
    return clip_dataset(
        data, items, data.eval_clip, train=False, seed=seed, num_classes=num_classes
    )


def eval_loader(
    data: DataConfig, items: list[Any], *, seed: int, place: Placement, num_classes: int = 0
) -> DataLoader:
    """The validation loader: every item exactly once over the ranks (`ExactEvalSampler`)."""
    dataset = eval_dataset(data, items, seed=seed, num_classes=num_classes)
    sampler = ExactEvalSampler(len(dataset), rank=place.rank, world_size=place.world_size)
    return DataLoader(
        dataset,
        batch_size=data.eval_batch_size or data.batch_size,
        sampler=sampler,
        drop_last=False,
        **loader_options(
            workers=data.workers, pin_memory=place.pin_memory, worker_start=data.worker_start
        ),
    )


WorkerStart = Literal["auto", "fork", "forkserver", "spawn"]
PREFETCH_BATCHES = 4  # per worker: a slow video's batch does not stall the step after it


def loader_options(
    *, workers: int, pin_memory: bool, worker_start: WorkerStart = "auto"
) -> dict[str, Any]:
    """The keyword arguments of every `DataLoader` that feeds a model (training, evaluation,
    two-stream evaluation, and the benches that time a step on loaded data), so that a bench
    loads as the trainer does: `workers` processes, started by `worker_start`
    (`data.worker_start`), persistent, `PREFETCH_BATCHES` batches ahead each, each worker
    initialised by `init_worker`, batches collated by `collate` and pinned for a CUDA device
    (`pin_memory`)."""
    return {
        "num_workers": workers,
        "collate_fn": collate,
        "pin_memory": pin_memory,
        # Workers start once per run: no per-epoch start-up, and no fork while a finished
        # loader's threads are exiting (a child forked then can deadlock in CPython 3.11).
        # The datasets share their epoch with the workers (`data/epoch_state.py`).
        "persistent_workers": workers > 0,
        "multiprocessing_context": worker_context(worker_start, workers=workers),
        "prefetch_factor": PREFETCH_BATCHES if workers > 0 else None,
        "worker_init_fn": init_worker,
    }


def worker_context(start: WorkerStart, *, workers: int) -> BaseContext | None:
    """The multiprocessing context loader workers start from (`data.worker_start`).

    forkserver and spawn workers receive the dataset pickled; their shared epoch travels as a
    handle to the same memory. A forkserver is told to import the data modules once, so each
    worker it forks starts with them loaded.
    """
    if workers == 0 or start == "auto":
        return None
    context = mp.get_context(start)
    if start == "forkserver":
        context.set_forkserver_preload(
            ["vidscale.data.dataset", "vidscale.data.prepared.shard_dataset"]
        )
    return context


def stop_workers(loader: DataLoader) -> None:
    """End the worker processes of `loader`'s current iterator now, if it has any.

    Persistent workers otherwise end when the loader is collected. After an error that is too
    late: the exception's traceback holds the iterator in a reference cycle, the garbage
    collector may finalize its queues before the iterator, the workers then never receive
    their stop message, and they ignore SIGTERM (`ignore_stop_signals`), so the process would
    wait for them at exit for ever. DataLoader keeps that iterator in `_iterator`.
    """
    shutdown = getattr(getattr(loader, "_iterator", None), "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def worker_pids(loader: DataLoader) -> list[int]:
    """The process ids of `loader`'s current workers (none before its first iteration)."""
    workers = getattr(getattr(loader, "_iterator", None), "_workers", None) or []
    return [w.pid for w in workers if w.pid is not None]


def init_worker(worker_id: int) -> None:
    """Every loader worker: stop signals left to the training process, and its stacks on
    `STACKS_SIGNAL` (the training process's hang watchdog asks for them)."""
    ignore_stop_signals(worker_id)
    faulthandler.register(STACKS_SIGNAL, all_threads=True)  # to stderr: the rank's log


def ignore_stop_signals(worker_id: int) -> None:
    """Loader workers leave SIGTERM / SIGINT / SIGUSR1 to the training process, which
    checkpoints and then ends them: SLURM and Ctrl-C signal every process of the job, and a
    worker dying first would fail the step that is needed to reach the checkpoint."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)
