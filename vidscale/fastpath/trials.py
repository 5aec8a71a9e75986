"""The fast path's probe, timed in this process: a few training steps of each candidate setting.

`probe` first leaves out every candidate whose gradients are not fp32's (`fastpath.gradients`),
then gives per-round seconds per candidate (interleaved, `fastpath.timing.time_round_robin`) for
`rule.choose`, and stops timing a candidate as soon as its rounds so far rule it out
(`rule.hopeless`); `fastpath.probe.decide` runs it in a child process
(`fastpath.isolation`), so that a setting that hangs or crashes cannot take the run with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from vidscale.errors import InputError
from vidscale.fastpath import hardware
from vidscale.fastpath.gradients import gradients, wrong_gradient
from vidscale.fastpath.rule import hopeless
from vidscale.fastpath.settings import FP32, Candidate
from vidscale.fastpath.subject import ProbeShape, Subject
from vidscale.fastpath.timing import time_round_robin


@dataclass(frozen=True)
class ProbeSettings:
    """Untimed warm-up rounds, timed rounds, and untimed calls before each timed one.
    `drop_hopeless`: stop timing a candidate once `choose` cannot take it (off: every
    candidate is timed in every round, for a table of all of them)."""

    warmup: int = 1
    repeats: int = 5
    settle: int = 1
    drop_hopeless: bool = True


PROBE = ProbeSettings()


@dataclass(frozen=True)
class Timed:
    """A probe's per-round seconds of the candidates timed in every round (rounds aligned),
    why each other candidate was not timed on (label -> `rule.hopeless`'s reason), and why
    each candidate left out before timing was (label -> `gradients.wrong_gradient`'s reason)."""

    samples: dict[str, list[float]]
    dropped: dict[str, str] = field(default_factory=dict)
    wrong: dict[str, str] = field(default_factory=dict)


class WrongGradients(InputError):
    """The reference candidate (the setting the run asked for, or the least change) gives
    gradients that are not fp32's on this device at the run's shape: it would not train."""


def wrong_candidates(
    reference: Subject,
    subjects: Mapping[str, Subject],
    *,
    on_turn: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """label -> why its gradients are not fp32's, for each candidate subject whose are not:
    one forward and backward each, from the same weights on the same batch as `reference`
    (fp32, default layout); raises `WrongGradients` when the first candidate's are not fp32's.
    `on_turn(label)` is told before each candidate's pass (the reference's own is the first
    candidate's), so that a setting that hangs or crashes here is named as in its timed turns
    (`isolation`)."""
    tell = on_turn or (lambda _: None)
    tell(next(iter(subjects)))
    expected = _gradients(reference)
    wrong = {}
    for i, (label, subject) in enumerate(subjects.items()):
        if subject is reference:
            continue
        if i:
            tell(label)
        problem = wrong_gradient(expected, _gradients(subject))
        if problem is not None:
            wrong[label] = f"its gradients are not fp32's: {problem}"
            if i == 0:
                raise WrongGradients(f"{label} would not train here: {wrong[label]}")
    return wrong


def _gradients(subject: Subject) -> dict[str, torch.Tensor]:
    autocast = subject.fast.autocast()
    return gradients(subject.forward, subject.clips, subject.labels, autocast=autocast)


def probe(
    build: Callable[[], nn.Module],
    settings_to_time: Sequence[Candidate],
    *,
    device: torch.device,
    shape: ProbeShape,
    settings: ProbeSettings = PROBE,
    ranks: int = 1,
    on_turn: Callable[[str], None] | None = None,
) -> Timed:
    """Seconds per training step (`subject.Subject`: the trainer's step on one process, a
    subject per candidate, the same weights and batch) of each candidate whose gradients are
    fp32's (`wrong_candidates`; the others are left out, `Timed.wrong`), per timed round.
    Raises `WrongGradients` when the first candidate's are not: the setting asked for, or the
    reference, would not train.

    With `settings.drop_hopeless`, a candidate is timed no more once its rounds so far rule it
    out of `choose` over the `settings.repeats` x `ranks` rounds its samples will be pooled
    into (every rank probes, `fastpath.probe`); the probe ends when only one is left.

    `build()` gives a fresh model on the CPU; the subjects are built and stepped under a
    forked RNG (CPU and `device`), so the caller's random streams are left exactly as they were.
    Process-wide settings (threads, host-memory retention, TF32) are the caller's: set them as
    training will run before probing. `on_turn(label)` is told before each candidate's turn
    (`time_round_robin`). This runs in the calling process: a candidate that hangs or crashes
    takes the process with it (`isolation.probe_isolated` runs it in a child).
    """
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        subjects = {
            c.label: Subject.build(build, setting=c, shape=shape, device=device)
            for c in settings_to_time
        }
        reference = subjects.get(FP32.label) or Subject.build(
            build, setting=FP32, shape=shape, device=device
        )
        wrong = wrong_candidates(reference, subjects, on_turn=on_turn)
        del reference
        calls = {label: s for label, s in subjects.items() if label not in wrong}
        dropped: dict[str, str] = {}

        def drop(so_far: Mapping[str, Sequence[float]]) -> list[str]:
            dropped.update(hopeless(so_far, total_rounds=settings.repeats * ranks))
            return list(dropped)

        samples = time_round_robin(
            calls,
            warmup=settings.warmup,
            repeats=settings.repeats,
            settle=settings.settle,
            sync=lambda: hardware.synchronize(device),
            on_turn=on_turn,
            drop=drop if settings.drop_hopeless and len(calls) > 1 else None,
        ).seconds
    del subjects, calls
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the probe's copies are not the run's: hand the memory back
    kept = {label: seconds for label, seconds in samples.items() if label not in dropped}
    return Timed(kept, dropped, wrong)
