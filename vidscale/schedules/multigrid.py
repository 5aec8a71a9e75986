"""The multigrid training schedule as pure math, reproducing PySlowFast's.

Wu, Girshick, He, Feichtenhofer, Krähenbühl, "A Multigrid Method for Efficiently Training Video
Models" (CVPR 2020). Reference implementation: PySlowFast (facebookresearch/SlowFast)
`slowfast/utils/multigrid.py` (the schedule), `utils/lr_policy.py` (the LR),
`utils/checkpoint.py:is_checkpoint_epoch` and `utils/misc.py:is_eval_epoch` (when to checkpoint
and evaluate), `datasets/multigrid_helper.py:ShortCycleBatchSampler` (the short cycle) and
`datasets/kinetics.py` (crop, scale jitter and temporal stride per clip). Nothing here imports
torch or the run config: a `MultigridSpec` of numbers goes in, a `MultigridSchedule` of numbers
comes out, and `tests/schedules/test_multigrid.py` checks it row by row against the per-epoch
schedule PySlowFast itself produces (`shared/fixtures/multigrid_k400_schedule.csv`).

With base shape (T0, S0) (frames, crop), base global batch B0 on G devices:

Long cycle (Wu et al. §3). Shape k has factors (t_k, s_k) (default (1/4, 1/√2), (1/2, 1/√2),
(1/2, 1), (1, 1)): T_k = round(T0·t_k), S_k = round(S0·s_k), batch factor
b(T, S) = round(T0·S0² / (T·S²)) and global batch b·B0, so a step costs about the same FLOPs at
every shape. With the short cycle on, stage k trains the shapes (T_k, S0·f0), (T_k, S0·f1),
(T_k, S_k) (f = 1/2, 1/√2 of the *base* crop S0, unrounded) and avg_b_k is the mean of their
three b's; without it avg_b_k = b_k. Each LR stage i of `steps` (epochs E_i) is split among the
shapes in proportion to avg_b (every shape gets the same iterations E_i / Σavg_b). The
iteration saving of that part is r = steps[-1] / Σ_i,k (E_i / Σavg_b), which is Σavg_b / K;
the base-shape fine-tune after steps[-1] gets (max_epoch - steps[-1]) / r · avg_b_K epochs (the
same saving). All epochs are then rescaled so that they sum to max_epoch · epoch_factor, and
the end epoch of each (LR stage, shape) is round() of the running sum (Python's round: halves go
to even, and the float sum is accumulated in PySlowFast's order so that halves fall the same
way). The run's max epoch is the last end. A (LR stage, shape) whose end equals the previous end
has no epoch: PySlowFast never trains it (its shape lookup, LR lookup and checkpoint rule all
skip it), so it is not a `Stage` here, though it stays in `steps` / `lrs` as in PySlowFast.

LR (steps policy). PySlowFast rewrites SOLVER.STEPS to 0 and the end of every (LR stage,
shape), the last end (max epoch) replaced by the middle of the fine-tune (floor division),
and SOLVER.LRS to lrs[i]·b_k per (LR stage, shape); the fine-tune keeps the previous relative
LR for its first half, then takes lrs[len(steps) - 1]·b (b = 1 at the base shape), i.e.
x0.1 for the shipped configs. lr(e) = LRS[j]·base_lr with j the last step <= e; during warmup
(e < warmup_epochs, *not* rescaled) lr(e) = warmup_start_lr + e·(lr(warmup_epochs) -
warmup_start_lr) / warmup_epochs. Cosine policy (not in PySlowFast, whose long cycle needs
steps): lr(e) = b(e)·(end + (base - end)·(1 + cos(π·e / max_epoch)) / 2) over the rescaled max
epoch, b(e) the batch factor of the epoch's long-cycle shape, the same warmup; `steps` then
only mark where long cycles end (none given: one long cycle over the whole run).

Short cycle (Wu et al. §3). Iteration i of an epoch trains entry i % 3 of
[(S0·f0, B·m0), (S0·f1, B·m1), (S, B)], crops int(round(S0·f_j)), m_j = round((S / (S0·f_j))²),
B the stage's per-device batch, smallest crop first and the same sequence on every rank. The
short-side scale jitter of a clip at crop c is [round(j_min·c / S0), j_max] (PySlowFast
kinetics.py: only the lower bound shrinks with the crop, `int(round(float(min) * crop /
DEFAULT_S))`, the upper bound stays). A clip's temporal stride is drawn uniformly from
[rate, max_sampling_rate], max_sampling_rate = rate·(T0 // T) (PySlowFast
LONG_CYCLE_SAMPLING_RATE; = rate at the base shape and without the long cycle).

BatchNorm (Wu et al.: a fixed number of clips per BN statistic; PySlowFast
`update_long_cycle`). With per-device long-cycle batch P and BN_BASE_SIZE n: P/n > 1 →
sub-batch BN with int(P/n) splits; P/n < 1 → sync BN over int(1 / (P/n)) devices; else plain BN
(counts PySlowFast could not run are reduced, see `bn_config`). The short cycle's larger
per-device batches keep the stage's splits.

Without the long cycle (PySlowFast `init_multigrid`): short cycle only → steps and max epoch
x epoch_factor (int()), relative LRs unchanged, the base shape throughout; neither → the plain
schedule. The BN rule above still applies to the base per-device batch.

Theoretical savings (`iteration_saving`, `flop_saving`) against `spec.baseline()` (max_epoch
epochs at the base shape and batch), N clips in the dataset: iterations = Σ_stages epochs · N /
mean_j B_j (a short cycle of 3 steps reads Σ_j B_j clips, B_j the global batch of entry j);
FLOPs = Σ_stages epochs · N · Σ_j B_j·T·c_j² / Σ_j B_j (FLOPs ∝ clips·T·S², a clip read once an
epoch, at crop c_j with the share B_j / Σ B_j); N cancels in the ratios. For the K400 config:
3.42x fewer iterations, 3.43x fewer FLOPs; long cycle only 2.19x, short cycle only 1.56x
(iterations).

Checkpoint / evaluation (PySlowFast `is_checkpoint_epoch`, `is_eval_epoch`): after the last
epoch, and inside each (LR stage, shape) [a, z) after epochs e with (z - 1 - e) % p == 0,
p = max((z - a) // eval_freq + 1, 1): about eval_freq times per shape, always at its last epoch.

Where PySlowFast breaks and this module does not (the design brief's §7): the long cycle without the
short cycle (PySlowFast indexes the missing third short-cycle shape for the fine-tune and
crashes), cosine LR with the long cycle (it needs SOLVER.STEPS), the short cycle on one device
(its batch sampler gets no sampler to wrap; here it is only numbers), and "neither cycle" (the
plain schedule). Without the long cycle PySlowFast falls back to TRAIN.CHECKPOINT_PERIOD; here
the eval_freq rule applies to each LR stage instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from vidscale.schedules.multigrid_shapes import (
    bn_config,
    jitter_range,
    max_sampling_rate,
    short_cycle_entries,
)
from vidscale.schedules.multigrid_spec import BNMode, MultigridSpec

__all__ = ["MultigridSchedule", "MultigridSpec", "Stage", "multigrid_schedule"]


@dataclass(frozen=True)
class Stage:
    """Consecutive epochs [first_epoch, first_epoch + epochs) with one long-cycle shape and one
    LR stage (never empty).

    `frames` x `crop`² is the long-cycle shape; `global_batch` = `batch_factor` x the base
    global batch and `per_device_batch` its share of one device. `lr_factor` multiplies
    `base_lr` (steps policy) or the cosine curve (cosine policy), already x `batch_factor`.
    `bn` / `bn_splits`: BatchNorm mode and its sub-batch splits or sync devices (1 for plain
    BN). `max_sampling_rate`: the largest random temporal stride of a clip. `short_cycle`:
    (crop, per-device batch) cycled per iteration (iteration i uses entry i % len), one entry
    when the short cycle is off; `jitter_scales`: the (min, max) short-side scale range of each
    entry.
    """

    first_epoch: int
    epochs: int
    frames: int
    crop: int
    global_batch: int
    per_device_batch: int
    batch_factor: int
    lr_factor: float
    bn: BNMode
    bn_splits: int
    max_sampling_rate: int
    short_cycle: tuple[tuple[int, int], ...]
    jitter_scales: tuple[tuple[int, int], ...]

    @property
    def end_epoch(self) -> int:
        return self.first_epoch + self.epochs

    def mean_global_batch(self, num_devices: int) -> float:
        """Clips per step over all devices, averaged over the short cycle."""
        return num_devices * sum(b for _, b in self.short_cycle) / len(self.short_cycle)

    def flops_per_clip(self) -> float:
        """Mean cost of one clip in units of frames x crop², clips weighted by the short cycle's
        batches (an epoch sees every clip once, in proportion to the batch of each entry)."""
        clips = sum(b for _, b in self.short_cycle)
        return sum(b * self.frames * c * c for c, b in self.short_cycle) / clips


@dataclass(frozen=True)
class MultigridSchedule:
    """The whole run: its stages, max epoch and rewritten LR steps, as PySlowFast computes them.

    `steps` / `lrs`: PySlowFast's rewritten SOLVER.STEPS and SOLVER.LRS (steps policy; the LR is
    `lrs[j]` x `base_lr` from `steps[j]` on), or, for the cosine policy, the epochs where the
    long-cycle shape changes and the batch factor that multiplies the cosine from there.
    `segment_ends`: the end epoch of every (LR stage, shape), zero-length ones included
    (PySlowFast's `multigrid.schedule`, which its checkpoint rule walks).
    """

    spec: MultigridSpec
    stages: tuple[Stage, ...]
    max_epoch: int
    steps: tuple[float, ...]
    lrs: tuple[float, ...]
    segment_ends: tuple[int, ...]

    def stage_at(self, epoch: int) -> Stage:
        """The stage that trains epoch `epoch` (0-based, < max_epoch)."""
        self._check_epoch(epoch)
        for stage in self.stages:
            if epoch < stage.end_epoch:
                return stage
        raise AssertionError("stages cover [0, max_epoch)")  # pragma: no cover

    def lr_at(self, epoch_exact: float) -> float:
        """The LR at the fractional epoch `epoch_exact` in [0, max_epoch] (PySlowFast
        `get_lr_at_epoch`, called with cur_epoch + iter / iters_per_epoch)."""
        if not 0 <= epoch_exact <= self.max_epoch:
            raise ValueError(f"epoch_exact must be in [0, {self.max_epoch}], got {epoch_exact}")
        spec = self.spec
        lr = self._policy_lr(epoch_exact)
        if epoch_exact < spec.warmup_epochs:
            # PySlowFast: a line from the start LR to the schedule's LR at the warmup's end,
            # whatever stage that is in (the batch factor there included).
            lr_end = self._policy_lr(spec.warmup_epochs)
            alpha = (lr_end - spec.warmup_start_lr) / spec.warmup_epochs
            lr = epoch_exact * alpha + spec.warmup_start_lr
        return lr

    def is_checkpoint_epoch(self, epoch: int) -> bool:
        """Whether to checkpoint, evaluate and recompute precise BN after epoch `epoch`."""
        self._check_epoch(epoch)
        if epoch + 1 == self.max_epoch:
            return True
        previous = 0
        for end in self.segment_ends:
            if epoch < end:
                period = max((end - previous) // self.spec.eval_freq + 1, 1)
                return (end - 1 - epoch) % period == 0
            previous = end
        raise AssertionError("segments cover [0, max_epoch)")  # pragma: no cover

    def rebuild_before(self, epoch: int) -> bool:
        """Whether the model, optimizer and loaders must be rebuilt before epoch `epoch`:
        where the long-cycle shape changes (PySlowFast `update_long_cycle` returns changed), and
        with it the batch, BN and short cycle, all functions of the shape. Never at epoch 0,
        which is built for its stage from the start."""
        self._check_epoch(epoch)
        if epoch == 0:
            return False
        now, before = self.stage_at(epoch), self.stage_at(epoch - 1)
        return _build_key(now) != _build_key(before)

    def rows(self) -> list[dict[str, object]]:
        """One row per epoch with the fixture's columns (`COLUMNS`); `lr` is the float at the
        epoch's first iteration, the rest as the fixture writes them."""
        out: list[dict[str, object]] = []
        for epoch in range(self.max_epoch):
            stage = self.stage_at(epoch)
            row: dict[str, object] = {
                "epoch": epoch,
                "T_fast": stage.frames,
                "S": stage.crop,
                "B_global": stage.global_batch,
                "B_per_gpu": stage.per_device_batch,
                "lr": self.lr_at(float(epoch)),
                "bn_norm_type": stage.bn,
                "bn_num_splits": stage.bn_splits,
                "max_sampling_rate": stage.max_sampling_rate,
                "short_cycle_crops": "/".join(str(c) for c, _ in stage.short_cycle),
                "short_cycle_per_gpu_bs": "/".join(str(b) for _, b in stage.short_cycle),
                "ckpt_eval_preciseBN": int(self.is_checkpoint_epoch(epoch)),
                "rebuild_model_before_epoch": int(self.rebuild_before(epoch)),
            }
            out.append(row)
        return out

    def iterations_per_clip(self) -> float:
        """Theoretical optimizer steps of the run per training clip: Σ epochs / mean global
        batch of the stage (a full short cycle of 3 steps consumes the sum of its 3 batches;
        the per-epoch tail that does not fill a batch is ignored)."""
        n = self.spec.num_devices
        return sum(s.epochs / s.mean_global_batch(n) for s in self.stages)

    def flops_per_clip(self) -> float:
        """Theoretical training FLOPs of the run per training clip, in units of one clip of
        frames x crop² (FLOPs ∝ clips x T x S²): Σ epochs x the stage's mean cost of a clip."""
        return sum(s.epochs * s.flops_per_clip() for s in self.stages)

    def iteration_saving(self) -> float:
        """Iterations of the plain run (`spec.baseline()`: max_epoch epochs of the base shape
        at the base batch) / iterations of this schedule."""
        return multigrid_schedule(self.spec.baseline()).iterations_per_clip() / (
            self.iterations_per_clip()
        )

    def flop_saving(self) -> float:
        """FLOPs of the plain run (`spec.baseline()`) / FLOPs of this schedule."""
        return multigrid_schedule(self.spec.baseline()).flops_per_clip() / self.flops_per_clip()

    def _policy_lr(self, epoch_exact: float) -> float:
        spec = self.spec
        factor = self.lrs[_step_index(self.steps, self.max_epoch, epoch_exact)]
        if spec.lr_policy == "steps":
            return factor * spec.base_lr
        offset = spec.warmup_epochs if spec.cosine_after_warmup else 0.0
        span = self.max_epoch - offset
        progress = (epoch_exact - offset) / span if span > 0 else 1.0
        end = spec.cosine_end_lr
        return factor * (end + (spec.base_lr - end) * (math.cos(math.pi * progress) + 1.0) * 0.5)

    def _check_epoch(self, epoch: int) -> None:
        if not 0 <= epoch < self.max_epoch:
            raise ValueError(f"epoch must be in [0, {self.max_epoch}), got {epoch}")


@dataclass(frozen=True)
class _Segment:
    """One (LR stage, long-cycle shape) of PySlowFast's schedule: [.., end)."""

    step_index: int
    frames: int
    crop: int
    batch_factor: int
    end: int


def multigrid_schedule(spec: MultigridSpec) -> MultigridSchedule:
    """The schedule of `spec`: long cycle, short cycle, both or neither (see the module doc)."""
    if spec.long_cycle:
        segments, max_epoch = _long_cycle_segments(spec)
    else:
        segments, max_epoch = _plain_segments(spec)
    if max_epoch < 1:
        raise ValueError(
            f"the rescaled run has {max_epoch} epochs: raise max_epoch or epoch_factor"
        )
    steps, lrs = _lr_steps(spec, segments)
    stages = _stages(spec, segments, steps, lrs, max_epoch)
    ends = tuple(s.end for s in segments)
    return MultigridSchedule(spec, stages, max_epoch, steps, lrs, ends)


def _long_cycle_steps(spec: MultigridSpec) -> tuple[float, ...]:
    """The LR-stage boundaries that the long cycles follow. No step after 0 (a constant LR, or
    a cosine without steps): one long cycle over the whole run and no separate fine-tune, the
    cycle's last shape being the base shape."""
    if len(spec.steps) >= 2:
        return spec.steps
    return (0.0, float(spec.max_epoch))


def _long_cycle_segments(spec: MultigridSpec) -> tuple[list[_Segment], int]:
    """PySlowFast `get_long_cycle_schedule`, the float operations in its order."""
    t0, s0 = spec.frames, spec.crop
    steps = _long_cycle_steps(spec)
    default_size = float(t0 * s0**2)
    avg_bs: list[float] = []
    shapes: list[tuple[int, int, int]] = []  # (b, T, S) of each long-cycle shape
    for t_factor, s_factor in spec.long_cycle_factors:
        base_t = round(t0 * t_factor)
        base_s = round(s0 * s_factor)
        # The short cycle's crops are fractions of the *base* crop, unrounded here (PySlowFast).
        sizes: list[float] = [float(base_s)]
        if spec.short_cycle:
            sizes = [s0 * spec.short_cycle_factors[0], s0 * spec.short_cycle_factors[1], base_s]
        bs = [round(default_size / (base_t * s * s)) for s in sizes]
        if min(bs) < 1:
            raise ValueError(
                f"long-cycle shape {base_t}x{base_s} is larger than the base {t0}x{s0}: "
                "its batch factor rounds to 0"
            )
        avg_bs.append(sum(bs) / len(bs))
        shapes.append((bs[-1], base_t, base_s))

    total_iters = 0.0
    raw: list[tuple[int, tuple[int, int, int], float]] = []
    for step_index in range(len(steps) - 1):
        step_epochs = steps[step_index + 1] - steps[step_index]
        for k, shape in enumerate(shapes):
            cur_epochs = step_epochs * avg_bs[k] / sum(avg_bs)
            total_iters += cur_epochs / avg_bs[k]
            raw.append((step_index, shape, cur_epochs))
    iter_saving = steps[-1] / total_iters
    # The fine-tune gets the same iteration saving as the cycles, at the last long-cycle shape
    # (the base shape for the default factors). PySlowFast takes that shape as the third
    # short-cycle entry of the last long-cycle shape, which is why it crashes without the short
    # cycle; it is the same shape.
    ft_epochs = (spec.max_epoch - steps[-1]) / iter_saving * avg_bs[-1]
    raw.append((len(steps) - 1, shapes[-1], ft_epochs))

    scale = spec.max_epoch * spec.epoch_factor / sum(r[2] for r in raw)
    segments: list[_Segment] = []
    total_epochs = 0.0
    for step_index, (b, t, s), epochs in raw:
        total_epochs += epochs * scale
        segments.append(_Segment(step_index, t, s, b, round(total_epochs)))
    return segments, segments[-1].end


def _plain_segments(spec: MultigridSpec) -> tuple[list[_Segment], int]:
    """No long cycle: one segment per LR stage at the base shape. With the short cycle,
    PySlowFast `init_multigrid` rescales the steps and max epoch by epoch_factor (int())."""
    factor = spec.epoch_factor if spec.short_cycle else 1.0
    max_epoch = int(spec.max_epoch * factor)
    steps = [0] if spec.lr_policy == "cosine" else [int(s * factor) for s in spec.steps]
    ends = [*steps[1:], max_epoch]
    segments = [
        _Segment(i, spec.frames, spec.crop, 1, min(end, max_epoch)) for i, end in enumerate(ends)
    ]
    return segments, max_epoch


def _lr_steps(
    spec: MultigridSpec, segments: Sequence[_Segment]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The rewritten (steps, relative LRs) of the run."""
    if spec.lr_policy == "cosine":
        # Cosine: the curve is continuous; only the batch factor steps, with the shape.
        starts = [0, *(s.end for s in segments[:-1])]
        return tuple(float(s) for s in starts), tuple(float(s.batch_factor) for s in segments)
    if not spec.long_cycle:
        starts = [0, *(s.end for s in segments[:-1])]
        return tuple(float(s) for s in starts), tuple(
            spec.relative_lr(s.step_index) for s in segments
        )
    # PySlowFast init_multigrid: STEPS = [0] + ends, the last replaced by the fine-tune's middle;
    # LRS = GAMMA**i x b per segment, the fine-tune's first half repeating the one before it.
    steps = [0, *(s.end for s in segments)]
    steps[-1] = (steps[-2] + steps[-1]) // 2
    lrs = [spec.relative_lr(s.step_index) * s.batch_factor for s in segments]
    lrs = [*lrs[:-1], lrs[-2], lrs[-1]]
    return tuple(float(s) for s in steps), tuple(lrs)


def _step_index(steps: Sequence[float], max_epoch: int, epoch_exact: float) -> int:
    """PySlowFast `get_step_index`: the LR stage of `epoch_exact` (repeated steps, i.e.
    zero-length stages, are skipped; past the end: the last stage)."""
    bounds = [*steps, max_epoch]
    for index, step in enumerate(bounds):
        if epoch_exact < step:
            return index - 1
    return len(bounds) - 2


def _stages(
    spec: MultigridSpec,
    segments: Sequence[_Segment],
    steps: Sequence[float],
    lrs: Sequence[float],
    max_epoch: int,
) -> tuple[Stage, ...]:
    """Group the epochs by (segment, LR stage): the segments split where the LR steps (the
    fine-tune's middle), zero-length segments vanish."""
    lrs_index: list[tuple[int, int]] = []
    segment = 0
    for epoch in range(max_epoch):
        while epoch >= segments[segment].end:
            segment += 1
        lrs_index.append((segment, _step_index(steps, max_epoch, epoch)))
    stages: list[Stage] = []
    first = 0
    for epoch in range(1, max_epoch + 1):
        if epoch < max_epoch and lrs_index[epoch] == lrs_index[first]:
            continue
        seg_index, lr_index = lrs_index[first]
        stages.append(_stage(spec, segments[seg_index], first, epoch - first, lrs[lr_index]))
        first = epoch
    return tuple(stages)


def _stage(
    spec: MultigridSpec, segment: _Segment, first: int, epochs: int, lr_factor: float
) -> Stage:
    b, frames, crop = segment.batch_factor, segment.frames, segment.crop
    global_batch = b * spec.global_batch
    per_device = global_batch // spec.num_devices
    bn, splits = bn_config(per_device, spec.bn_base_size, spec.num_devices)
    entries = short_cycle_entries(spec, crop, per_device)
    jitter = tuple(jitter_range(spec.jitter_scales, c, spec.crop) for c, _ in entries)
    return Stage(
        first_epoch=first,
        epochs=epochs,
        frames=frames,
        crop=crop,
        global_batch=global_batch,
        per_device_batch=per_device,
        batch_factor=b,
        lr_factor=lr_factor,
        bn=bn,
        bn_splits=splits,
        max_sampling_rate=max_sampling_rate(spec, frames),
        short_cycle=entries,
        jitter_scales=jitter,
    )


def _build_key(stage: Stage) -> tuple[object, ...]:
    return (stage.frames, stage.crop, stage.global_batch, stage.bn, stage.bn_splits)
