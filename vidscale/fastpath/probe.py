"""`train.amp` / `train.channels_last` = "auto": decided by timing the run's model, not assumed.

bf16 autocast and channels-last do not always pay: at small frames the matrix units sit idle
while autocast's casts and the layout conversions remain, so the same model on the same CPU can
be slower in bf16 at the demo's 32² and faster at 224² (docs/benchmarks.md, "`auto` fast path:
what the probe chooses" and "Numbers moved out of module docstrings"). So "auto" is measured,
per device and per shape:

- **Probe** (`probe`, run in a child process by `fastpath.isolation`, so that a setting that
  hangs or crashes there is left out instead of ending the run): a few forward + backward
  passes (no optimizer step) of a copy of the run's model, at its per-process batch and clip
  shape, for every candidate setting (`probe.candidates`: fp32, fp32 + channels-last,
  bf16, bf16 + channels-last; only the axes left at "auto", bf16 only where the device has
  bf16 units), interleaved round-robin after a warm-up round, each sample right after an
  untimed call (`fastpath.timing.time_round_robin`); a candidate whose first rounds already rule
  it out of the rule below is timed no more (`rule.hopeless`), so settings clearly
  slower than fp32 cost a round or two, not five. The run's weights, optimizer and random
  streams are exactly those of a run without the probe (another process; in-process, the copy
  is built and fed under a forked RNG).
- **Gradients** (`fastpath.gradients`): before any timing, one forward and backward of each
  candidate from the same weights on the same batch is compared with fp32's, and a candidate
  whose gradients are not fp32's (not finite, or norms off by more than bf16's rounding
  explains) is left out with the first wrong parameter named: a probe that only timed took
  bf16 for I3D where torch's bf16 kernels gave garbage, and every step of the run was skipped.
  The reference candidate's being wrong is a `ProbeFailed` naming it.
- **Rule** (`rule.choose`, a pure function of the samples): per round, a candidate's
  speedup over another is the other's time over its own; it beats the other when the median of
  these per-round ratios exceeds 1 by more than their noise (interquartile range over median,
  the "noise" of `bench models`) and by at least 2%, and it was faster in enough rounds to pass
  a sign test (5 of 5, 9 of 10). Ties go to the exact arithmetic: the fastest fp32 candidate
  that beats fp32 in the default layout is taken first, and a bf16 candidate must then beat
  that one.
- **Ranks**: every rank probes at once (as they will train: sharing the node's cores), the
  samples are gathered and pooled, and rank 0's choice is broadcast, so all ranks use one
  setting (`decide` ends with that broadcast whatever the source).
- **Cache** (`fastpath.cache`): the decision is stored under a key naming the device, torch,
  the model, the shape, threads, processes per node and the candidates; a hit skips the probe.
- **Resume**: a checkpoint records the decision (`run.record.RunRecord`, read back as a
  `decision.Resumed`); a resumed run takes it from there without measuring, so it continues
  with the arithmetic it started with. The rule is one for every start: per axis, an explicit
  setting of this start wins and an axis at "auto" takes the record, whichever other axis is
  explicit and whatever this device can do. A recorded bf16 on a device without bf16 units (a
  run moved from an AVX512-BF16 or AMX machine to an AVX2 one) stays bf16, emulated by
  autocast: the same arithmetic, slower, and the start says so in one
  line (`EMULATED_BF16`), as every start that trains in bf16 there does (explicit, probed,
  cached or resumed); `train.amp=off` switches such a run to fp32. A checkpoint from before
  decisions were recorded continues under the old hardware rule (`settings.hardware_rule`).
- **Shapes**: one decision per run, at the recipe's base shape: multigrid phases and the adaptive
  batch keep it (the parameters' layout is fixed when the model is built).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vidscale.distributed.collectives import all_gather_object, broadcast_object, world_size
from vidscale.fastpath import hardware
from vidscale.fastpath.cache import cache_key, read_cached, write_cached
from vidscale.fastpath.decision import FastPathDecision, Resumed
from vidscale.fastpath.gradients import CHECK_VERSION
from vidscale.fastpath.isolation import (
    LIMITS,
    HangLimits,
    IsolatedProbe,
    ProbeFailed,
    probe_isolated,
)
from vidscale.fastpath.rule import MIN_GAIN, RULE, SIGN_TEST_ALPHA
from vidscale.fastpath.settings import (
    Candidate,
    candidates,
    device_has_bf16,
    hardware_rule,
    requested,
    set_device_options,
)
from vidscale.fastpath.trials import PROBE, ProbeSettings, ProbeShape, probe

__all__ = [
    "PROBE",
    "FastPathDecision",
    "ProbeFailed",
    "ProbeSettings",
    "ProbeShape",
    "Resumed",
    "decide",
    "probe",
    "probe_key",
    "settled",
]

EMULATED_BF16 = (
    "this device has no bf16 units, so bf16 autocast is emulated here: the same arithmetic, "
    "slower than fp32 (--set train.amp=off switches this run to fp32)"
)


def _explicit(bf16: bool, cl: bool, *, amp: str, channels_last: str) -> FastPathDecision:
    return FastPathDecision(
        bf16, cl, "explicit", reason=f"train.amp={amp}, train.channels_last={channels_last}"
    )


def _recorded(
    checkpoint: Resumed, fixed: tuple[bool | None, bool | None], device: torch.device
) -> FastPathDecision:
    """The resumed run's own decision, explicit settings of this start winning per axis."""
    if checkpoint.fast_path is None:
        rule = hardware_rule(device)
        found = FastPathDecision(
            rule.bf16,
            rule.channels_last,
            "hardware",
            reason="the rule its checkpoint was trained with (bf16 + channels-last where the "
            "device has bf16 units; no decision recorded)",
        )
    else:
        found = checkpoint.fast_path
        where = f"{found.source}: {found.reason}" if found.reason else found.source
        found = dataclasses.replace(
            found, source="checkpoint", reason=f"as the resumed run recorded it ({where})"
        )
    bf16, cl = fixed
    resumed = dataclasses.replace(
        found,
        bf16=found.bf16 if bf16 is None else bf16,
        channels_last=found.channels_last if cl is None else cl,
    )
    return resumed


def _saying_emulation(decision: FastPathDecision, device: torch.device) -> FastPathDecision:
    """`decision` whose reason ends with `EMULATED_BF16` when it trains in bf16 on a `device`
    without bf16 units, and never otherwise: a note a record carries from another device
    (a resumed run's reason quotes its record's) goes first."""
    reason = decision.reason.replace(f"; {EMULATED_BF16}", "")
    if decision.bf16 and not device_has_bf16(device):
        reason = f"{reason}; {EMULATED_BF16}"
    return dataclasses.replace(decision, reason=reason)


def _probe_all_ranks(
    build: Callable[[], nn.Module],
    settings_to_time: Sequence[Candidate],
    *,
    device: torch.device,
    shape: ProbeShape,
    settings: ProbeSettings,
    host_memory: bool,
    limits: HangLimits,
    progress: Callable[[str], None] | None = None,
) -> FastPathDecision:
    """Every rank probes, each in a child process (`probe_isolated`); a candidate that failed
    on any rank is left out on all, the samples of the others are pooled (rounds stay aligned:
    each rank's rounds follow the previous rank's in every candidate's list) and chosen from.
    A candidate one rank stopped timing (`probe`: its rounds there already rule it out of the
    pooled choice) is dropped on all. The reference failing on any rank raises `ProbeFailed`
    on every rank."""
    set_device_options(device)  # the fp32 candidate is TF32 on CUDA, as training runs it
    load, started = hardware.load_average(), time.monotonic()
    mine: IsolatedProbe | str
    try:
        mine = probe_isolated(
            build,
            settings_to_time,
            device=device,
            shape=shape,
            settings=settings,
            host_memory=host_memory,
            ranks=world_size(),
            limits=limits,
            progress=progress,
        )
    except ProbeFailed as err:
        mine = str(err)
    everyone = all_gather_object(mine)
    for rank, result in enumerate(everyone):
        if isinstance(result, str):
            raise ProbeFailed(f"rank {rank}: {result}" if len(everyone) > 1 else result)
    probes = [r for r in everyone if isinstance(r, IsolatedProbe)]
    failed = {label: what for p in reversed(probes) for label, what in p.failed.items()}
    dropped = {
        label: what
        for p in reversed(probes)
        for label, what in p.dropped.items()
        if label not in failed
    }
    pooled: dict[str, list[float]] = {
        c.label: [] for c in settings_to_time if c.label not in failed | dropped
    }
    for result in probes:
        for label, seconds in result.samples.items():
            if label in pooled:
                pooled[label].extend(seconds)
    decision = FastPathDecision.from_probe(
        IsolatedProbe(pooled, failed, dropped), shape=shape, load_average=load
    )
    return dataclasses.replace(decision, seconds=time.monotonic() - started)


def decide(
    device: torch.device,
    *,
    enabled: bool,
    amp: str,
    channels_last: str,
    build: Callable[[], nn.Module],
    shape: ProbeShape,
    key_fields: Mapping[str, Any],
    cache: Path | None,
    checkpoint: Resumed | None,
    is_main: bool,
    settings: ProbeSettings = PROBE,
    host_memory: bool = False,
    limits: HangLimits = LIMITS,
    log: Callable[[str], None] = lambda _: None,
) -> FastPathDecision:
    """The fast-path setting of a run, the same on every rank (a collective: every rank calls it).

    In order: `enabled=False` is all off; both axes explicit are used as given; a resumed run
    (`checkpoint`: the record of the checkpoint it continues) takes its recorded decision for
    the "auto" axes; a cache hit (read by rank 0) is reused; otherwise every rank probes
    (`probe`, in a child process that trains as this one: `host_memory` retention on CPU, its
    threads; a candidate that hangs past `limits`, crashes or raises there is left out,
    `fastpath.isolation`) and rank 0 chooses from the pooled samples (`choose`) and writes the
    cache. `build` must pickle. `key_fields` name the run's model and process layout in the
    cache key, beside the device, torch, `shape`, threads and candidates added here. `log`
    receives what is worth printing (rank 0's). Raises `ProbeFailed` when the reference setting
    fails in the probe.
    """
    decision = settled(
        device, enabled=enabled, amp=amp, channels_last=channels_last, checkpoint=checkpoint
    )
    if decision is None:
        fixed = requested(enabled=enabled, amp=amp, channels_last=channels_last)
        to_time = candidates(device, bf16=fixed[0], channels_last=fixed[1])
        key = probe_key(device, shape=shape, candidates=to_time, settings=settings, **key_fields)
        decision = _cached_or_probed(
            build,
            to_time,
            device=device,
            shape=shape,
            settings=settings,
            key=key,
            cache=cache,
            is_main=is_main,
            host_memory=host_memory,
            limits=limits,
            log=log,
        )
    decision = _saying_emulation(decision, device)
    return FastPathDecision.from_record(broadcast_object(decision.record()))


def settled(
    device: torch.device,
    *,
    enabled: bool,
    amp: str,
    channels_last: str,
    checkpoint: Resumed | None,
) -> FastPathDecision | None:
    """The decision where nothing needs measuring: all off, both axes explicit, or the
    decision recorded in the resumed `checkpoint` (its record) for the "auto" axes. None when
    the cache or a probe must decide (a fresh run with an axis at "auto")."""
    fixed = requested(enabled=enabled, amp=amp, channels_last=channels_last)
    if not enabled:
        return FastPathDecision(False, False, "off", reason="train.fast_path=false")
    bf16, cl = fixed
    if bf16 is not None and cl is not None:
        explicit = _explicit(bf16, cl, amp=amp, channels_last=channels_last)
        return _saying_emulation(explicit, device)
    if checkpoint is not None:
        return _saying_emulation(_recorded(checkpoint, fixed, device), device)
    to_time = candidates(device, bf16=bf16, channels_last=cl)
    if len(to_time) == 1:  # an axis at "auto" that this device leaves one value of
        only = to_time[0]
        return FastPathDecision(
            only.bf16,
            only.channels_last,
            "explicit",
            reason=f"train.amp={amp}, train.channels_last={channels_last}: the only setting "
            "to time here (no bf16 units)",
        )
    return None


def _cached_or_probed(
    build: Callable[[], nn.Module],
    to_time: Sequence[Candidate],
    *,
    device: torch.device,
    shape: ProbeShape,
    settings: ProbeSettings,
    key: str,
    cache: Path | None,
    is_main: bool,
    host_memory: bool,
    limits: HangLimits,
    log: Callable[[str], None],
) -> FastPathDecision:
    hit = None
    if is_main and cache is not None:
        hit, problem = read_cached(cache, key)
        if problem:
            log(f"warning: fast-path cache: {problem}")
    hit = broadcast_object(hit)
    if hit is not None:
        return dataclasses.replace(FastPathDecision.from_record(hit), source="cache")
    labels = ", ".join(c.label for c in to_time)
    rounds = f"{settings.warmup} + {settings.repeats} rounds"
    log(f"fast path: timing {labels} at {shape.text()} ({rounds}) to decide train.amp=auto")
    decision = _probe_all_ranks(
        build,
        to_time,
        device=device,
        shape=shape,
        settings=settings,
        host_memory=host_memory,
        limits=limits,
        progress=log if is_main else None,
    )
    for label, what in decision.failed.items():
        log(f"warning: fast path: {label} left out of the probe ({what})")
    if is_main and cache is not None:
        problem = write_cached(cache, key, decision.record())
        if problem:
            log(f"warning: fast-path cache: {problem}")
    return decision


def probe_key(
    device: torch.device,
    *,
    shape: ProbeShape,
    candidates: Sequence[Candidate],
    settings: ProbeSettings,
    **run: Any,
) -> str:
    """The cache key of a probe: what decides its outcome (device, torch build, threads, shape,
    candidates, how it was timed and chosen) and the run's own fields `run` (model, processes
    per node, host-memory retention)."""
    fields = {
        "device": f"{device.type}:{hardware.device_name(device)}",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "clips": shape.text(),
        "classes": shape.num_classes,
        "candidates": ",".join(c.label for c in candidates),
        "probe": f"w{settings.warmup}r{settings.repeats}s{settings.settle}"
        + ("" if settings.drop_hopeless else " all"),
        # another rule, or another gradient check, measures again
        "rule": f"{RULE}/{MIN_GAIN}/{SIGN_TEST_ALPHA}/{CHECK_VERSION}",
        **run,
    }
    return cache_key(fields)
