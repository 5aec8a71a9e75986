"""One rank of `vidscale bench scaling`: train N steps of a model the way `vidscale train` does,
and time each step's parts (TSM paper §3c, §4 "Scalability", Fig. 6).

Every rank builds the one benchmark subject (`fastpath.subject.Subject`: the model from the
registry under the subjects' seed, so every rank starts from the same weights, at the fast-path
setting, with the benches' SGD) and the data-parallel strategy from `build_strategy` (DDP with a
gradient hook, or AAVG), and trains through the strategy's wrapper with the loop's own
`train_step` (`Subject.loaded`: every rank agreeing on every step) on batches from a real
`DataLoader` set up as the trainer's (`data.loaders.loader_options`). Per measured step it
records, on its own clock:

- `step_s`: the whole step (`train_step`, the strategy's `after_step` and the traffic read-out,
  then a device synchronisation so that queued GPU work is inside the step);
- `data_wait_s`: the time blocked in `next(loader)` (`StepResult.wait_s`): data loading that
  the computation did not hide;
- `comm_exposed_s`: communication the step waited for (`Traffic.exposed_seconds`: DDP's
  gradient hooks and the wait from the last bucket's readiness to the end of the last
  all-reduce; AAVG's whole averaging) plus DDP's forward buffer broadcast (`forward_sync_s`,
  timed between DDP's forward and its module's: the BatchNorm statistics rank 0 broadcasts);
- `comm_in_flight_s`, `comm_bytes`: time with a collective in flight (overlapped or not) and
  bytes put into collectives;
- `thread_cpu_s`: CPU time of the training thread (which runs every operator with one thread):
  well below `compute_s`, the process waited for a core (other processes on the machine) or
  for the slowest rank at the step's agreement;
- `process_cpu_s`: CPU time of the whole rank process (the training thread's, and its other
  threads': gloo's sending, receiving and adding): on a rank pinned to one core, the part of
  the step that is neither is time that core gave to something outside the process, or idled.

`compute_s = step_s - data_wait_s - comm_exposed_s` is what remains: forward, backward,
optimizer and the loop's per-step agreement (one all-reduce of five numbers, which also waits
for the slowest rank). The data are random uint8 clips held in memory (`RandomClips`), so a
step costs what the model and the network cost, not what decoding costs (`bench data-wait`
measures that); with `data` set, the trainer's own loader reads a dataset
(`scaling.data.real_batches`), and the data wait is real.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from vidscale.bench.scaling.config import SINGLE, ScalingConfig, Variant, variants
from vidscale.bench.scaling.data import real_batches
from vidscale.data.inputs import ModelInput
from vidscale.data.loaders import loader_options
from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.collectives import all_gather_object, barrier
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.distributed.parallel import DataParallel
from vidscale.distributed.peers.failure import fail_together
from vidscale.distributed.strategy import DDPStrategy, build_strategy
from vidscale.distributed.sync.comm_handle import CommConfig
from vidscale.distributed.sync.comm_timing import Mark, mark, seconds_between
from vidscale.distributed.sync.ddp import is_ddp
from vidscale.fastpath.hardware import load_average, synchronize
from vidscale.fastpath.host_memory import retain_freed_host_memory
from vidscale.fastpath.probe import decide
from vidscale.fastpath.settings import Candidate
from vidscale.fastpath.subject import Subject
from vidscale.models.registry import build_model
from vidscale.step.applied import AppliedSteps, NothingTrained
from vidscale.step.objective import objective_for


class RandomClips(Dataset[dict[str, Any]]):
    """`length` training items in the layout of `VideoClipDataset` (`{"inputs": {"rgb": uint8
    (3, T, H, W)}, "label", "index", "skipped", "readable"}`), drawn from `pool` random clips
    made once, so producing an item costs no decoding and no random numbers."""

    def __init__(
        self, *, length: int, pool: int, frames: int, size: int, num_classes: int, seed: int
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        self.length = length
        self.clips = torch.randint(0, 256, (pool, 3, frames, size, size), generator=g).to(
            torch.uint8
        )
        self.labels = torch.randint(0, num_classes, (pool,), generator=g).tolist()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        k = index % len(self.labels)
        return {
            "inputs": {"rgb": self.clips[k]},
            "label": self.labels[k],
            "index": index,
            "skipped": [],
            "readable": True,
        }


class ForwardSyncTimer:
    """Seconds between entering DDP's forward and entering its module's forward: DDP's
    pre-forward, whose cost is the broadcast of rank 0's buffers (BatchNorm statistics) to
    every rank, a blocking collective that the gradient hooks do not see. Zero without DDP.
    Timed with the gradient hooks' clock (`comm_timing.mark`: CUDA events on a GPU)."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self.device = device
        self._spans: list[tuple[Mark, Mark]] = []
        self._entered: Mark | None = None
        self._handles: list[Any] = []
        if is_ddp(model):
            inner = model.module
            assert isinstance(inner, nn.Module)
            self._handles = [
                model.register_forward_pre_hook(self._enter),
                inner.register_forward_pre_hook(self._leave),
            ]

    def _enter(self, module: nn.Module, args: Any) -> None:
        self._entered = mark(self.device)

    def _leave(self, module: nn.Module, args: Any) -> None:
        if self._entered is not None:
            self._spans.append((self._entered, mark(self.device)))
            self._entered = None

    def take(self) -> float:
        """Seconds since the last call (waits for the CUDA events)."""
        spans, self._spans = self._spans, []
        return sum((seconds_between(start, end) for start, end in spans), 0.0)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


@dataclass
class StepSamples:
    """One rank's measured steps of one (model, variant, world size), in seconds and bytes."""

    rank: int
    step_s: list[float]
    data_wait_s: list[float]
    comm_exposed_s: list[float]
    forward_sync_s: list[float]
    comm_in_flight_s: list[float]
    comm_bytes: list[int]
    comm_rounds: list[int]
    thread_cpu_s: list[float]  # CPU time of the training thread during the step
    # CPU time of every thread of the process during the step (gloo's included)
    process_cpu_s: list[float] = field(default_factory=list)

    @classmethod
    def empty(cls, rank: int) -> StepSamples:
        return cls(rank, [], [], [], [], [], [], [], [], [])


@dataclass
class _Run:
    """The built pieces of one measurement."""

    subject: Subject
    strategy: DataParallel
    batches: Iterator[dict[str, Any]]
    forward_sync: ForwardSyncTimer
    grad_bytes: int
    params: int


def _build(
    cfg: ScalingConfig, env: DistEnv, name: str, variant: Variant, setting: Candidate
) -> _Run:
    subject = Subject.build(
        functools.partial(build_model, cfg.model_config(name)),
        setting=setting,
        shape=cfg.probe_shape(),
        device=env.device,
    )
    comm = CommConfig(
        hook=variant.hook,
        bucket_cap_mb=cfg.bucket_cap_mb,
        powersgd_start_step=max(2, cfg.warmup - 1),  # compressed from the last warm-up step on
    )
    strategy = build_strategy(
        env,
        comm,
        name=DDPStrategy.name if variant.strategy == SINGLE else variant.strategy,
        aavg=AAVGConfig(k=variant.k),
    )
    wrapped = strategy.wrap(subject.model, subject.optimizer)
    wrapped.train()
    subject.through(
        wrapped,
        micro_batch=strategy.micro_batch,
        world_size=env.world_size,
        objective=objective_for(multi_label=cfg.multi_label),
    )
    trainable = [p for p in subject.model.parameters() if p.requires_grad]
    return _Run(
        subject=subject,
        strategy=strategy,
        batches=real_batches(cfg, env, name) if cfg.data else _random_batches(cfg, env),
        forward_sync=ForwardSyncTimer(wrapped, env.device),
        grad_bytes=sum(p.numel() * p.element_size() for p in trainable),
        params=sum(p.numel() for p in trainable),
    )


def _random_batches(cfg: ScalingConfig, env: DistEnv) -> Iterator[dict[str, Any]]:
    data = RandomClips(
        length=(cfg.warmup + cfg.steps) * cfg.batch,
        pool=cfg.batch,
        frames=cfg.frames,
        size=cfg.size,
        num_classes=cfg.num_classes,
        seed=cfg.seed + 1 + env.rank,
    )
    return iter(random_loader(data, cfg, env))


def random_loader(data: RandomClips, cfg: ScalingConfig, env: DistEnv) -> DataLoader:
    """In-memory random clips, loaded as the trainer loads (`loader_options`)."""
    return DataLoader(
        data,
        batch_size=cfg.batch,
        **loader_options(workers=cfg.workers, pin_memory=env.device.type == "cuda"),
    )


def fast_setting(cfg: ScalingConfig, env: DistEnv, name: str) -> Candidate:
    """The fast-path setting `name` runs with: as `cfg.fast_settings` gives it (the launcher
    probed it once for every process count), else decided in this world as training decides
    (a collective: the probe on every rank, rank 0's choice; not cached)."""
    given = cfg.fast_setting(name)
    if given is not None or not cfg.fast_path:
        return Candidate.from_label(given or "fp32")
    decision = decide(
        env.device,
        enabled=True,
        amp="auto",
        channels_last="auto",
        build=functools.partial(build_model, cfg.model_config(name)),
        shape=cfg.probe_shape(),
        key_fields={"model": name, "processes": env.local_world_size},
        cache=None,
        checkpoint=None,
        is_main=env.is_main,
        host_memory=env.device.type == "cpu",
    )
    if env.is_main:
        print(f"bench scaling: {name}: {decision.describe()}", flush=True)
    return decision.candidate


def measure(
    cfg: ScalingConfig, env: DistEnv, name: str, variant: Variant, setting: Candidate
) -> dict[str, Any]:
    """Train `warmup + steps` steps of model `name` under `variant` on this rank; return its
    measured steps (`StepSamples` as a dict), how many applied their update, and the model's
    size. Raises `NothingTrained` (on every rank) when none of the measured steps applied."""
    run = _build(cfg, env, name, variant, setting)
    samples = StepSamples.empty(env.rank)
    prepare = ModelInput("rgb", 3)
    run.strategy.take_traffic()
    applied = AppliedSteps()  # the measured steps' (the subject's own count has the warm-up's)
    for step in range(cfg.warmup + cfg.steps):
        synchronize(env.device)
        start, start_cpu, start_process = (
            time.perf_counter(),
            time.thread_time(),
            time.process_time(),
        )
        result = run.subject.loaded(run.batches, prepare=prepare, clips=cfg.batch)
        # The warm-up is an epoch of its own: AAVG averages at its end (as at every epoch end),
        # so the first averaging's one-time costs stay out, and every k-th measured step.
        in_epoch = step + 1 if step < cfg.warmup else step - cfg.warmup + 1
        run.strategy.after_step(step_in_epoch=in_epoch, epoch_end=step == cfg.warmup - 1)
        traffic = run.strategy.take_traffic()
        forward_sync = run.forward_sync.take()
        synchronize(env.device)
        if step < cfg.warmup:
            continue
        applied.add(result)
        samples.step_s.append(time.perf_counter() - start)
        samples.thread_cpu_s.append(time.thread_time() - start_cpu)
        samples.process_cpu_s.append(time.process_time() - start_process)
        samples.data_wait_s.append(result.wait_s)
        samples.comm_exposed_s.append(traffic.exposed_seconds + forward_sync)
        samples.forward_sync_s.append(forward_sync)
        samples.comm_in_flight_s.append(traffic.seconds + forward_sync)
        samples.comm_bytes.append(traffic.bytes_sent)
        samples.comm_rounds.append(traffic.rounds)
    run.forward_sync.remove()
    # The same on every rank (the step's agreement): every rank refuses the row together.
    applied.check(f"{name} {variant.label} at {setting.label}, {env.world_size} process(es)")
    return {
        "applied_steps": applied.applied,
        "samples": asdict(samples),
        "grad_bytes": run.grad_bytes,
        "params": run.params,
        "fast_path": run.subject.fast.describe(),
    }


def measure_world(cfg: ScalingConfig) -> list[dict[str, Any]] | None:
    """Join torchrun's process group and measure every (model, variant) at its world size.

    Returns the measurements on rank 0 (every rank's samples under `ranks`), None elsewhere.
    """
    env = init_distributed(cfg.device)
    torch.set_num_threads(cfg.threads)
    if env.device.type == "cpu" and cfg.fast_path:
        retain_freed_host_memory()  # as the trainer's CPU fast path (`fastpath/host_memory.py`)
    measurements: list[dict[str, Any]] = []
    with fail_together(env, expected=(NothingTrained,)):
        for name in cfg.models:
            setting = fast_setting(cfg, env, name)
            for variant in variants(cfg, procs=env.world_size):
                if env.is_main:
                    print(f"bench scaling: {name}, {variant.label}, {env.world_size} process(es)")
                load_before = load_average()
                result = measure(cfg, env, name, variant, setting)
                gc.collect()  # the model, its optimizer and DDP's buffers before the next
                ranks = all_gather_object(result["samples"])
                barrier()
                measurements.append(
                    {
                        "model": name,
                        **variant.as_dict(),
                        "procs": env.world_size,
                        "device": str(env.device),
                        "fast_path": result["fast_path"],
                        "params": result["params"],
                        "grad_bytes": result["grad_bytes"],
                        "applied_steps": result["applied_steps"],
                        "load_average": [load_before, load_average()],
                        "ranks": ranks,
                    }
                )
    return measurements if env.is_main else None
