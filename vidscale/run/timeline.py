"""A run's sizes, fixed at start; its phases; and the LR as a pure function of the position.

`RunSizes` holds the sizes of the recipe's base shape (the global batch, accumulation, steps per
epoch and base LR a checkpoint records and a resume checks). `Timeline` is what the run does
epoch by epoch: a list of `Phase`s computed up front by `make_timeline` (one phase for a plain
run; a multigrid run has one per long-cycle stage, Wu et al. §3) and the LR at every step. Both
are pure functions of the config, the process count and the dataset size, so a resumed run
finds its place from (epoch, step in epoch) alone.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, replace
from typing import Literal

from vidscale.config import ConfigError, RunConfig
from vidscale.data.clip import ClipSpec, at_shape
from vidscale.data.samplers import BatchRequest, RequestCycle
from vidscale.optim.factory import effective_accumulate
from vidscale.schedules.lr import LRConfig, lr_at, scaled_lr
from vidscale.schedules.multigrid import MultigridSchedule, MultigridSpec, multigrid_schedule


@dataclass(frozen=True)
class RunSizes:
    global_batch: int
    accumulate: int  # micro-batches per optimizer step on this world size
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    base_lr: float  # the peak: lr_per_8_clips x global_batch / 8
    world_size: int = 1
    micro_batch: int = 1  # clips per process per micro-batch
    train_size: int = 0  # training videos

    def record(self) -> dict[str, object]:
        """Plain values for a checkpoint (`weights_only` loads them)."""
        return asdict(self)


def requested_global_batch(cfg: RunConfig, *, world_size: int) -> int:
    """The global batch `cfg` asks for on `world_size` processes."""
    # Checked here, not in `config.validate`: it needs the run's world size.
    try:
        accumulate = effective_accumulate(cfg.optim, world_size=world_size)
    except ValueError as err:
        raise ConfigError(f"optim.{err}") from err
    return cfg.data.batch_size * world_size * accumulate


def run_sizes(
    cfg: RunConfig,
    *,
    world_size: int,
    train_size: int,
    global_batch: int | None = None,
    micro_batch: int | None = None,
    base_lr: float | None = None,
) -> RunSizes:
    """The run's sizes on `world_size` processes.

    `global_batch` (a resumed run's) is kept whatever the process count: accumulation adapts,
    and a process count that cannot divide it is refused. Steps per epoch are
    `train_size // global_batch` on any process count (floor(floor(n/W)/(b*a)) = floor(n/(W*b*a))).
    `micro_batch` (default `data.batch_size`) and `base_lr` (default: the linear scaling rule)
    are set by an adapted batch size (`train.phases.adaptive_batch`).
    """
    micro = micro_batch or cfg.data.batch_size
    if global_batch is None:
        global_batch = requested_global_batch(cfg, world_size=world_size)
    # Checked here, not in `config.validate`: these need the world size and the data's size.
    if global_batch % (micro * world_size):
        raise ConfigError(
            f"global batch {global_batch} cannot be kept on {world_size} process(es) with "
            f"data.batch_size={micro}: {global_batch} is not a multiple of {micro} x "
            f"{world_size} (choose a data.batch_size that divides {global_batch // world_size})"
        )
    accumulate = global_batch // (micro * world_size)
    steps_per_epoch = train_size // global_batch
    if steps_per_epoch < 1:
        raise ConfigError(
            f"{train_size} training videos cannot fill one step of global batch {global_batch} "
            "(lower data.batch_size, optim.accumulate or optim.simulate_world_size)"
        )
    total = steps_per_epoch * cfg.train.epochs
    warmup = round(cfg.lr.warmup_epochs * steps_per_epoch)
    if base_lr is None:
        base_lr = scaled_lr(cfg.optim.lr_per_8_clips, global_batch)
    return RunSizes(
        global_batch,
        accumulate,
        steps_per_epoch,
        total,
        warmup,
        base_lr,
        world_size=world_size,
        micro_batch=micro,
        train_size=train_size,
    )


def schedule_position(sizes: RunSizes, *, epoch: int, step_in_epoch: int) -> int:
    """Where a run is on its LR schedule, in steps of `sizes`: counted from epochs, so that a
    batch size changed between epochs (fewer, larger steps) continues the same curve over
    epochs. Equal to the optimizer step count while the sizes never changed."""
    return epoch * sizes.steps_per_epoch + step_in_epoch


def step_lr(sizes: RunSizes, cfg: RunConfig, position: int) -> float:
    """The LR at schedule `position` (`schedule_position`)."""
    return _lr_at_position(sizes, cfg.lr, position)


def _lr_at_position(sizes: RunSizes, lr_config: LRConfig, position: int) -> float:
    return lr_at(
        position,
        base_lr=sizes.base_lr,
        total_steps=sizes.total_steps,
        warmup_steps=sizes.warmup_steps,
        cfg=lr_config,
        steps_per_epoch=sizes.steps_per_epoch,
    )


def recipe_row(name: str, cfg: RunConfig, *, world_size: int, train_size: int) -> dict[str, object]:
    """What a recipe resolves to on `world_size` processes for a dataset of `train_size` videos."""
    sizes = run_sizes(cfg, world_size=world_size, train_size=train_size)
    return {
        "recipe": name,
        "model": cfg.model.name,
        "frames": cfg.data.train_clip.frames,
        "recipe_gpus": cfg.optim.simulate_world_size or world_size,
        "clips_per_gpu": cfg.data.batch_size,
        "accumulate": sizes.accumulate,
        "global_batch": sizes.global_batch,
        "lr": sizes.base_lr,
        "warmup_epochs": cfg.lr.warmup_epochs,
        "warmup_steps": sizes.warmup_steps,
        "steps_per_epoch": sizes.steps_per_epoch,
        "epochs": cfg.train.epochs,
        "total_steps": sizes.total_steps,
        "optimizer": cfg.optim.name,
    }


BatchNormMode = Literal["batchnorm", "sub_batchnorm", "sync_batchnorm"]


@dataclass(frozen=True)
class Shape:
    """One step's clips on one process: `micro_batch` clips of `frames` x `crop`^2, per
    micro-batch."""

    frames: int
    crop: int
    micro_batch: int


@dataclass(frozen=True)
class Phase:
    """Consecutive epochs trained alike.

    Step i of an epoch has shape `shapes[i % len(shapes)]` (the multigrid short cycle: the same
    sequence on every rank) and `accumulate` micro-batches. `global_batch` is the clips of one
    step at the phase's own (long-cycle) shape over all processes; `lr_factor` multiplies the
    base schedule (multigrid scales it with the batch); BatchNorm runs as `bn_mode` with
    `bn_splits` groups (sub-batch splits or sync devices); dense clips draw their stride up to
    `max_stride` (0: the clip spec's stride).
    """

    first_epoch: int
    epochs: int
    first_step: int
    steps_per_epoch: int
    shapes: tuple[Shape, ...]
    accumulate: int
    global_batch: int
    lr_factor: float = 1.0
    bn_mode: BatchNormMode = "batchnorm"
    bn_splits: int = 1
    max_stride: int = 0

    @property
    def end_epoch(self) -> int:
        return self.first_epoch + self.epochs

    def shape_at(self, step_in_epoch: int) -> Shape:
        return self.shapes[step_in_epoch % len(self.shapes)]

    def clips_before(self, step_in_epoch: int) -> int:
        """Clips one process has read in this epoch before step `step_in_epoch` (its resume
        offset in the epoch's sample order)."""
        full, rest = divmod(step_in_epoch, len(self.shapes))
        cycle = sum(s.micro_batch for s in self.shapes)
        partial = sum(s.micro_batch for s in self.shapes[:rest])
        return (full * cycle + partial) * self.accumulate

    def requests(self, step_in_epoch: int, base: ClipSpec) -> list[BatchRequest]:
        """The micro-batches of steps `step_in_epoch` .. the epoch's end, in order; a shape
        equal to `base` requests the dataset's own spec (so a plain run reads as it always
        did)."""
        out: list[BatchRequest] = []
        for step in range(step_in_epoch, self.steps_per_epoch):
            shape = self.shape_at(step)
            spec = self._spec(shape, base)
            out.extend([BatchRequest(shape.micro_batch, spec)] * self.accumulate)
        return out

    def request_cycle(self, base: ClipSpec) -> RequestCycle:
        """All micro-batches of an epoch, from its first step, in compact form (what a
        streamed dataset's workers receive); request i equals `requests(0, base)[i]`."""
        cycle = tuple(BatchRequest(s.micro_batch, self._spec(s, base)) for s in self.shapes)
        return RequestCycle(cycle, self.steps_per_epoch * self.accumulate, self.accumulate)

    def _spec(self, shape: Shape, base: ClipSpec) -> ClipSpec | None:
        if (shape.frames, shape.crop, self.max_stride) == (base.frames, base.crop_size, 0):
            return None
        return at_shape(base, frames=shape.frames, crop_size=shape.crop, max_stride=self.max_stride)


def steps_in_epoch(per_process: int, shapes: tuple[Shape, ...], accumulate: int) -> int:
    """Steps whose clips fit in `per_process` samples, the shapes cycled step by step (the tail
    that does not fill a step is dropped, as a plain epoch drops it)."""
    cycle = sum(s.micro_batch for s in shapes) * accumulate
    full, left = divmod(per_process, cycle)
    steps = full * len(shapes)
    for shape in shapes:
        left -= shape.micro_batch * accumulate
        if left < 0:
            break
        steps += 1
    return steps


@dataclass(frozen=True)
class Timeline:
    """The run's phases and its LR at every (epoch, step in epoch)."""

    sizes: RunSizes
    phases: tuple[Phase, ...]
    lr_config: LRConfig
    multigrid: MultigridSchedule | None = None

    @property
    def epochs(self) -> int:
        return self.phases[-1].end_epoch

    @property
    def total_steps(self) -> int:
        last = self.phases[-1]
        return last.first_step + last.epochs * last.steps_per_epoch

    def phase_at(self, epoch: int) -> Phase:
        """The phase epoch `epoch` belongs to (the last one past the end)."""
        starts = [p.first_epoch for p in self.phases]
        return self.phases[max(0, bisect.bisect_right(starts, epoch) - 1)]

    def lr(self, *, epoch: int, step_in_epoch: int) -> float:
        """The LR of step `step_in_epoch` of epoch `epoch`.

        Plain: the step schedule of `schedules.lr` at `schedule_position` (epochs counted, so a
        batch size adapted between epochs continues the same curve). Multigrid: PySlowFast's
        schedule at the exact epoch `epoch + step_in_epoch / steps_per_epoch`, its stage LRs
        already scaled by the long-cycle batch factor.
        """
        phase = self.phase_at(epoch)
        if self.multigrid is not None:
            return self.multigrid.lr_at(epoch + step_in_epoch / phase.steps_per_epoch)
        position = schedule_position(self.sizes, epoch=epoch, step_in_epoch=step_in_epoch)
        return _lr_at_position(self.sizes, self.lr_config, position)

    def evaluates_after(self, epochs_done: int, *, every: int) -> bool:
        """Whether the run evaluates after `epochs_done` epochs: every `every` epochs, or, with
        multigrid, at its checkpoint epochs (about `eval_freq` times per shape and at each
        shape's last epoch); always after the last."""
        if epochs_done >= self.epochs:
            return True
        if self.multigrid is not None:
            return self.multigrid.is_checkpoint_epoch(epochs_done - 1)
        return epochs_done % every == 0


def make_timeline(cfg: RunConfig, sizes: RunSizes) -> Timeline:
    """The phases of a run of `cfg` under `sizes`: one for a plain run; one per multigrid stage
    (`schedules.multigrid`) when `multigrid.long_cycle` or `multigrid.short_cycle` is set."""
    clip = cfg.data.train_clip
    if not cfg.multigrid.enabled:
        shape = Shape(clip.frames, clip.crop_size, sizes.micro_batch)
        phase = Phase(
            first_epoch=0,
            epochs=cfg.train.epochs,
            first_step=0,
            steps_per_epoch=sizes.steps_per_epoch,
            shapes=(shape,),
            accumulate=sizes.accumulate,
            global_batch=sizes.global_batch,
        )
        return Timeline(sizes, (phase,), cfg.lr)
    schedule = multigrid_schedule(multigrid_spec(cfg, sizes))
    per_process = sizes.train_size // sizes.world_size
    phases: list[Phase] = []
    step = 0
    for stage in schedule.stages:
        if stage.epochs == 0:
            continue
        shapes = tuple(Shape(stage.frames, crop, batch) for crop, batch in stage.short_cycle)
        spe = steps_in_epoch(per_process, shapes, sizes.accumulate)
        if spe < 1:
            raise ConfigError(
                f"multigrid: {per_process} clips per process cannot fill one step of the stage "
                f"at {stage.frames} frames x {stage.crop}^2 (global batch {stage.global_batch}; "
                "lower data.batch_size or use more data)"
            )
        phases.append(
            Phase(
                first_epoch=stage.first_epoch,
                epochs=stage.epochs,
                first_step=step,
                steps_per_epoch=spe,
                shapes=shapes,
                accumulate=sizes.accumulate,
                global_batch=stage.global_batch,
                lr_factor=stage.lr_factor,
                bn_mode=stage.bn,
                bn_splits=stage.bn_splits,
                max_stride=stage.max_sampling_rate if clip.sampling == "dense" else 0,
            )
        )
        step += stage.epochs * spe
    return Timeline(sizes, tuple(phases), cfg.lr, schedule)


def multigrid_spec(cfg: RunConfig, sizes: RunSizes) -> MultigridSpec:
    """The multigrid schedule's inputs from the run: base shape and batch, LR schedule.

    Each micro-batch of a step counts as one device's batch (`num_devices` = processes x
    accumulation), so per-device batches are per-process micro-batches.
    """
    mg, clip, lr = cfg.multigrid, cfg.data.train_clip, cfg.lr
    # `cfg` is validated (`config.validate`): no adaptive batch, epoch milestones, no poly LR.
    devices = sizes.world_size * sizes.accumulate
    bn_base = mg.bn_base_size or sizes.global_batch // devices
    warmup_start = sizes.base_lr * lr.warmup_start_factor
    constant = MultigridSpec(
        frames=clip.frames,
        crop=clip.crop_size,
        global_batch=sizes.global_batch,
        num_devices=devices,
        sampling_rate=clip.stride if clip.sampling == "dense" else 1,
        max_epoch=cfg.train.epochs,
        base_lr=sizes.base_lr,
        lr_policy="steps",
        steps=(0.0,),
        lrs=(1.0,),
        warmup_epochs=lr.warmup_epochs,
        warmup_start_lr=warmup_start,
        long_cycle=mg.long_cycle,
        short_cycle=mg.short_cycle,
        long_cycle_factors=mg.long_cycle_factors,
        short_cycle_factors=mg.short_cycle_factors,
        epoch_factor=mg.epoch_factor,
        bn_base_size=bn_base,
        eval_freq=mg.eval_freq,
        long_cycle_sampling_rate=mg.long_cycle_sampling_rate,
        jitter_scales=clip.jitter,
    )
    if lr.schedule == "cosine":
        return replace(constant, lr_policy="cosine", steps=(), lrs=(), cosine_end_lr=lr.final_lr)
    if lr.schedule == "step":
        steps = (0.0, *(float(m) for m in lr.milestones))
        return replace(constant, steps=steps, lrs=tuple(lr.gamma**i for i in range(len(steps))))
    return constant
