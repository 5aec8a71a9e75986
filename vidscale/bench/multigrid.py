"""`vidscale bench multigrid`: what multigrid's schedule saves in compute time on this device.

Wu et al. 2020 (§4, Table 1) state multigrid's saving in iterations and FLOPs; what a device
gains in time depends on how well it runs the small shapes and the large batches of the long and
short cycles. This measures it: the recipe's run is planned as `vidscale schedule` plans it
(`run.timeline.make_timeline`: every phase, its short-cycle shapes, its steps) for the baseline
(no multigrid) and for the long cycle, the short cycle and both; every distinct per-device shape
(frames x crop^2 x clips) of those plans, with its phase's micro-batches per step, is timed on
this device as a training step of the recipe's model, round-robin (`fastpath.timing`): the
benchmark subject (`fastpath.subject.Subject`) stepping through the one training step
(`step.run.train_step`: `accumulate` forwards and backwards in the autocast, the gradient norm,
the agreement, the update if finite); a plan's compute time is then the sum over its steps of
their shape's step time. The ratio to the baseline is multigrid's measured speed-up in compute,
beside the
theoretical savings (iterations; FLOPs as clips x frames x crop^2, as the paper counts them) and
the saving in the model's own multiply-accumulates, counted at each shape.

What it leaves out, by design: data loading (the shapes are random tensors on the device) and
gradient communication (one device; a multigrid plan all-reduces once per step, so fewer steps
also means fewer all-reduces: `vidscale plan` models that side). Every shape runs
plain BN: a phase's sub-batch BN (a regrouping of the same statistics) or synchronised BN (a
small all-gather per layer) is not applied. The fast path is the trainer's (`train.fast_path`:
"auto" runs the trainer's probe at the base shape unless a setting is given); the clips are the
subject's (float, on the device) and its optimizer the benches' SGD (`step.fixed_batch`). Every
timed step counts whether it applied its update, and a bench none of whose steps did is refused
(`step.applied`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vidscale.bench import options
from vidscale.bench.options import option
from vidscale.bench.results import plain, write_result
from vidscale.config import RunConfig
from vidscale.distributed.env import DistEnv
from vidscale.errors import InputError
from vidscale.fastpath import hardware
from vidscale.fastpath.settings import Candidate, FastPath, resolve_fast_path
from vidscale.fastpath.subject import ProbeShape, Subject, random_batch
from vidscale.fastpath.timing import spread, time_round_robin
from vidscale.models.costs import model_info
from vidscale.models.registry import build_model
from vidscale.run.timeline import Shape, Timeline, make_timeline, run_sizes
from vidscale.train.builders import decide_fast_path, model_input

# (long cycle, short cycle) of each variant.
VARIANTS = {
    "baseline": (False, False),
    "long": (True, False),
    "short": (False, True),
    "both": (True, True),
}
COMPARED = tuple(name for name in VARIANTS if name != "baseline")  # the baseline always runs


@dataclass(frozen=True)
class MultigridBenchConfig:
    """The run to plan (`world_size` processes, `dataset_size` training videos), the variants
    to compare with the baseline, and the timing: `warmup` untimed and `repeats` timed rounds,
    each sample the mean of `steps` calls. Each field is a flag of `bench multigrid`
    (`bench.options`)."""

    world_size: int = option(1, help="processes of the run it describes", low=1)
    dataset_size: int = option(240_000, help="training videos (Kinetics-400's)", low=1)
    variants: tuple[str, ...] = option(COMPARED, help="besides the baseline", choices=COMPARED)
    warmup: int = options.warmup(1, help="untimed rounds")
    repeats: int = option(5, help="timed rounds", low=1)
    steps: int = options.steps(2, help="calls per sample")

    def validate(self) -> None:
        """Raise `InputError` naming the flag of the first value that cannot work."""
        if not self.variants:
            raise InputError("--variants: none given; choose from long, short, both")
        options.check_options(self)


def variant_config(cfg: RunConfig, variant: str) -> RunConfig:
    """`cfg` with multigrid's cycles as `variant` names them (baseline: neither)."""
    long, short = VARIANTS[variant]
    return replace(cfg, multigrid=replace(cfg.multigrid, long_cycle=long, short_cycle=short))


def micro_batch_counts(timeline: Timeline) -> Counter[Shape]:
    """Micro-batches per shape over the whole run: every step of every phase, its short-cycle
    shape, `accumulate` times."""
    counts: Counter[Shape] = Counter()
    for (shape, accumulate), steps in step_counts(timeline).items():
        counts[shape] += steps * accumulate
    return counts


def step_counts(timeline: Timeline) -> Counter[tuple[Shape, int]]:
    """Optimizer steps per (shape, micro-batches per step) over the whole run: every step of
    every phase, at its short-cycle shape."""
    counts: Counter[tuple[Shape, int]] = Counter()
    for phase in timeline.phases:
        cycle, rest = divmod(phase.steps_per_epoch, len(phase.shapes))
        for i, shape in enumerate(phase.shapes):
            steps = cycle + (1 if i < rest else 0)
            counts[shape, phase.accumulate] += steps * phase.epochs
    return counts


Plans = dict[str, tuple[Timeline, Counter[tuple[Shape, int]]]]


def plan_variants(cfg: RunConfig, bench: MultigridBenchConfig) -> Plans:
    """Each variant's timeline (the baseline first) and its steps per (shape, accumulate)."""
    out = {}
    for name in ("baseline", *bench.variants):
        variant = variant_config(cfg, name)
        plan = run_sizes(variant, world_size=bench.world_size, train_size=bench.dataset_size)
        timeline = make_timeline(variant, plan)
        out[name] = (timeline, step_counts(timeline))
    return out


def _fast_path(
    cfg: RunConfig, device: torch.device, setting: Candidate | None, *, micro_batch: int
) -> FastPath:
    """`setting` if given, else what the trainer's "auto" decides for one process at the base
    shape (its cached decision on this machine, or its probe)."""
    if setting is None:
        env = DistEnv(0, 0, 1, 1, device, "nccl" if device.type == "cuda" else "gloo")
        setting = decide_fast_path(cfg, env, checkpoint=None, micro_batch=micro_batch).candidate
    t = cfg.train
    return resolve_fast_path(
        device,
        enabled=t.fast_path,
        amp=t.amp,
        channels_last=t.channels_last,
        compile=False,
        auto=setting,
    )


def _subject(
    cfg: RunConfig, base: Shape, *, fast: FastPath, device: torch.device
) -> tuple[Subject, int]:
    """The benchmark subject: the recipe's model at the fast path on a batch of the base shape
    (the model's input channels: 3, or 2 for flow); and those channels."""
    channels = model_input(cfg).channels
    shape = ProbeShape(base.micro_batch, channels, base.frames, base.crop, cfg.model.num_classes)
    subject = Subject.build(
        lambda: build_model(cfg.model), setting=fast.candidate, shape=shape, device=device
    )
    return subject, channels


def _step_calls(
    cfg: RunConfig, steps: Sequence[tuple[Shape, int]], subject: Subject, channels: int
) -> dict[str, Callable[[], object]]:
    """One training step per (shape, accumulate) (`Subject.on`: `accumulate` micro-batches of
    the shape's random clips, one update), all on the subject's one model and optimizer."""
    calls: dict[str, Callable[[], object]] = {}
    for shape, accumulate in steps:
        batch = ProbeShape(
            shape.micro_batch, channels, shape.frames, shape.crop, cfg.model.num_classes
        )
        clips, labels = random_batch(batch, subject.clips.device)

        def step(clips: Tensor = clips, labels: Tensor = labels, k: int = accumulate) -> object:
            return subject.on(clips, labels, accumulate=k)

        calls[step_key(shape, accumulate)] = step
    return calls


def shape_key(shape: Shape) -> str:
    return f"{shape.frames}x{shape.crop}^2x{shape.micro_batch}"


def step_key(shape: Shape, accumulate: int) -> str:
    """The shape, and its micro-batches per step where there are several."""
    key = shape_key(shape)
    return key if accumulate == 1 else f"{key} x{accumulate}"


@dataclass(frozen=True)
class MultigridConfig:
    """What `bench multigrid` runs (`run`): the recipe named `recipe`, resolved with its
    overrides (`config`), the run it describes and the timing (`bench`, the JSON's `config`),
    and the fast-path `setting` (None: what the trainer's "auto" decides at the base shape)."""

    recipe: str
    config: RunConfig
    bench: MultigridBenchConfig = field(default_factory=MultigridBenchConfig)
    setting: Candidate | None = None


@dataclass(frozen=True)
class MultigridResult:
    """What `bench multigrid` measured: the recipe and its model, the timing settings
    (`config`), the device, the fast path timed, how many of the timed steps applied their
    update (`applied_steps` of `timed_steps`), one row per (shape, micro-batches per step) (its
    measured seconds per step, steps and micro-batches per variant) and one per variant (the
    baseline first: compute seconds, measured and theoretical savings). `to_dict()` is what
    `--out-json` writes."""

    recipe: str
    model: str
    config: MultigridBenchConfig
    device: dict[str, Any]
    fast_path: str
    timed_steps: int
    applied_steps: int
    shapes: list[dict[str, Any]]
    variants: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = plain(asdict(self))
        return out


def run(
    config: MultigridConfig,
    *,
    out_json: Path,
    progress: bool = False,
    device: str | torch.device = "auto",
    echo: Callable[[str], None] = print,
) -> MultigridResult:
    """Time a step at every shape of the variants' plans on `device` and sum them per plan; the
    per-shape rows, the per-variant rows and the device, written to `out_json` atomically.
    `progress` sends the shapes' count and each round to `echo`. Raises `InputError` for bad
    variants or counts (`MultigridBenchConfig.validate`), and `NothingTrained` when none of
    the timed steps applied its update."""
    bench, cfg = config.bench, config.config
    bench.validate()
    if cfg.model.num_classes == 0:  # "take it from the data": there is none here
        cfg = replace(cfg, model=replace(cfg.model, num_classes=400))
    dev = hardware.resolve_device(device)
    plans = plan_variants(cfg, bench)
    steps = sorted({s for _, counts in plans.values() for s in counts}, key=_size_order)
    base = plans["baseline"][0].phases[0].shapes[0]
    fast = _fast_path(cfg, dev, config.setting, micro_batch=base.micro_batch)
    say = echo if progress else (lambda line: None)
    say(f"{config.recipe}: {len(steps)} shapes on {hardware.device_name(dev)}, {fast.describe()}")
    subject, channels = _subject(cfg, base, fast=fast, device=dev)
    samples = time_round_robin(
        _step_calls(cfg, steps, subject, channels),
        warmup=bench.warmup,
        repeats=bench.repeats,
        steps=bench.steps,
        sync=lambda: hardware.synchronize(dev),
        on_round=lambda r: say(f"  round {r + 1}/{bench.warmup + bench.repeats}"),
    )
    subject.applied.check(f"{config.recipe} at {fast.candidate.label}")
    seconds = {k: statistics.median(v) for k, v in samples.seconds.items()}
    shape_rows = [_shape_row(cfg, s, seconds, samples.seconds, plans) for s in steps]
    gmacs = {r["shape"]: r["gmacs_per_clip"] for r in shape_rows}
    variant_rows = [
        _variant_row(name, timeline, counts, seconds, gmacs)
        for name, (timeline, counts) in plans.items()
    ]
    baseline = variant_rows[0]
    for row in variant_rows:
        row["measured_speedup"] = baseline["compute_s"] / row["compute_s"]
        row["model_mac_saving"] = baseline["gmacs"] / row["gmacs"]
    result = MultigridResult(
        recipe=config.recipe,
        model=cfg.model.name,
        config=bench,
        device=hardware.describe(dev),
        fast_path=fast.candidate.label,
        timed_steps=subject.applied.measured,
        applied_steps=subject.applied.applied,
        shapes=shape_rows,
        variants=variant_rows,
    )
    write_result(out_json, result.to_dict())
    return result


def _size_order(step: tuple[Shape, int]) -> tuple[int, int, int, int]:
    shape, accumulate = step
    return (shape.frames * shape.crop * shape.crop, shape.frames, shape.micro_batch, accumulate)


def _shape_row(
    cfg: RunConfig,
    step: tuple[Shape, int],
    seconds: dict[str, float],
    samples: dict[str, list[float]],
    plans: Plans,
) -> dict[str, Any]:
    shape, accumulate = step
    key = step_key(shape, accumulate)
    macs = model_info(cfg.model, frames=shape.frames, size=shape.crop).macs
    return {
        "shape": key,
        "frames": shape.frames,
        "crop": shape.crop,
        "clips": shape.micro_batch,
        "accumulate": accumulate,
        "gmacs_per_clip": macs / 1e9,
        "seconds": seconds[key],  # one step: `accumulate` micro-batches and the update
        "spread": spread(samples[key]),
        "clips_per_s": shape.micro_batch * accumulate / seconds[key],
        "steps": {name: counts[step] for name, (_, counts) in plans.items()},
        "micro_batches": {name: counts[step] * accumulate for name, (_, counts) in plans.items()},
    }


def _variant_row(
    name: str,
    timeline: Timeline,
    counts: Counter[tuple[Shape, int]],
    seconds: dict[str, float],
    gmacs: dict[str, float],
) -> dict[str, Any]:
    def over_steps(per_step: Callable[[Shape, int], float]) -> float:
        return sum(n * per_step(s, k) for (s, k), n in counts.items())

    schedule = timeline.multigrid
    return {
        "variant": name,
        "steps": timeline.total_steps,
        "micro_batches": round(over_steps(lambda s, k: k)),
        "clips": round(over_steps(lambda s, k: k * s.micro_batch)),
        # The model's forward multiply-accumulates over the run, at each clip's shape.
        "gmacs": over_steps(lambda s, k: k * s.micro_batch * gmacs[step_key(s, k)]),
        "compute_s": over_steps(lambda s, k: seconds[step_key(s, k)]),
        "theoretical_iteration_saving": 1.0 if schedule is None else schedule.iteration_saving(),
        "theoretical_flop_saving": 1.0 if schedule is None else schedule.flop_saving(),
    }


def format_report(result: MultigridResult) -> str:
    """The shapes table, then the variants table, as printed."""
    names = [v["variant"] for v in result.variants]
    lines = [
        f"{'shape (T x S^2 x clips)':>28s} {'GMACs/clip':>10s} {'s/step':>8s} "
        f"{'spread':>6s} {'clips/s':>8s}  " + " ".join(f"{n:>9s}" for n in names)
    ]
    for r in result.shapes:
        counts = " ".join(f"{r['steps'][n]:9d}" for n in names)
        lines.append(
            f"{r['shape']:>28s} {r['gmacs_per_clip']:10.2f} {r['seconds']:8.4f} "
            f"{r['spread']:6.1%} {r['clips_per_s']:8.1f}  {counts}"
        )
    lines.append(
        f"steps per variant; x N: N micro-batches a step; "
        f"{result.applied_steps} of {result.timed_steps} timed steps applied their update"
    )
    lines.append("")
    lines.append(
        f"{'variant':>9s} {'steps':>9s} {'compute':>10s} {'measured x':>10s} "
        f"{'iterations x':>12s} {'FLOPs x':>8s} {'model MACs x':>12s}"
    )
    for v in result.variants:
        lines.append(
            f"{v['variant']:>9s} {v['steps']:9,d} {_duration(v['compute_s']):>10s} "
            f"{v['measured_speedup']:10.2f} {v['theoretical_iteration_saving']:12.2f} "
            f"{v['theoretical_flop_saving']:8.2f} {v['model_mac_saving']:12.2f}"
        )
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds:.1f} s"
