"""The fast path's decision rule: which setting to train with, from interleaved timings.

A pure function of the samples (`choose`), so that it can be tested on given numbers and a
recorded decision can be replayed from the samples it stores. See `fastpath.probe` for where
the samples come from.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from vidscale.fastpath.settings import Candidate
from vidscale.fastpath.timing import spread

# A gain below 2% does not pay for leaving exact arithmetic, however steady the timing.
MIN_GAIN = 0.02
# A candidate must be faster in so many rounds that a coin would get there at most 5% of times.
SIGN_TEST_ALPHA = 0.05
RULE = 2  # names this rule in the probe's cache key


@dataclass(frozen=True)
class Measured:
    """One candidate in a probe: median seconds per step, the median per-round speedup over
    the reference (reference seconds / these), that ratio's noise (IQR / median), and in how
    many rounds it was faster than the reference."""

    seconds: float
    speedup: float
    noise: float
    faster_rounds: int


@dataclass(frozen=True)
class Choice:
    chosen: str
    reference: str
    measured: dict[str, Measured]
    reason: str


def rounds_needed(n: int, *, alpha: float = SIGN_TEST_ALPHA) -> int | None:
    """The fewest of `n` rounds a candidate must be faster in to count as faster: the sign
    test's threshold, reached by a coin (no real difference) with probability <= `alpha`.
    None below 5 rounds (even 4 of 4 happens 1 time in 16 by chance)."""
    for k in range(n + 1):
        if sum(math.comb(n, j) for j in range(k, n + 1)) <= alpha * 2**n:
            return k
    return None


def reference_of(labels: Iterable[str]) -> str:
    """The candidate with the least change: no bf16 unless all have it, then the default layout."""
    kinds = {label: Candidate.from_label(label) for label in labels}
    return min(kinds, key=lambda label: (kinds[label].bf16, kinds[label].channels_last))


def _versus(a: Sequence[float], b: Sequence[float]) -> Measured:
    """`a` against `b`, round by round: the speedups are b's seconds / a's."""
    ratios = [tb / ta for ta, tb in zip(a, b, strict=True)]
    faster = sum(r > 1 for r in ratios)
    return Measured(statistics.median(a), statistics.median(ratios), spread(ratios), faster)


def _beats(m: Measured, *, rounds: int, min_gain: float) -> bool:
    needed = rounds_needed(rounds)
    gain_clear = m.speedup - 1 > max(m.noise, min_gain)
    return needed is not None and m.faster_rounds >= needed and gain_clear


def _check_samples(samples: Mapping[str, Sequence[float]]) -> None:
    if not samples:
        raise ValueError("no candidates were timed")
    counts = {len(s) for s in samples.values()}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(f"every candidate needs the same number (>= 1) of rounds: {counts}")
    for label, seconds in samples.items():
        Candidate.from_label(label)
        if not all(math.isfinite(t) and t > 0 for t in seconds):
            raise ValueError(f"{label}: times must be finite and positive, got {list(seconds)}")


def choose(samples: Mapping[str, Sequence[float]], *, min_gain: float = MIN_GAIN) -> Choice:
    """The setting to train with, from per-round seconds per candidate label (rounds aligned:
    the i-th sample of every candidate comes from the same round).

    The reference is the candidate with the least change (`reference_of`). A candidate beats another when, over the per-round ratios
    (other's seconds / its seconds), (1) the median exceeds 1 + max(noise, `min_gain`), noise
    being the ratios' interquartile range over their median, and (2) it was faster in enough
    rounds to pass a sign test (`rounds_needed`: 5 of 5, 9 of 10), so that bursts of
    contention that happen to favour it in a few rounds cannot make it win. Starting from the
    reference, the fastest fp32 candidate that beats it is taken, then the fastest bf16
    candidate that beats what was taken: nothing leaves the reference, and no bf16 candidate
    replaces an exact one, on a difference within the noise.
    """
    _check_samples(samples)
    kinds = {label: Candidate.from_label(label) for label in samples}
    reference = reference_of(samples)
    rounds = len(samples[reference])
    measured = {label: _versus(seconds, samples[reference]) for label, seconds in samples.items()}
    chosen, reasons = reference, []
    for bf16 in (False, True):
        rivals = {}
        for label in samples:
            if kinds[label].bf16 is bf16 and label != chosen:
                m = _versus(samples[label], samples[chosen])
                if _beats(m, rounds=rounds, min_gain=min_gain):
                    rivals[label] = (
                        f"{label} {m.speedup:.2f}x {chosen} (noise {m.noise:.0%}, faster in "
                        f"{m.faster_rounds}/{rounds} rounds)"
                    )
        if rivals:
            chosen = max(rivals, key=lambda label: measured[label].speedup)
            reasons.append(rivals[chosen])
    if chosen == reference and len(samples) > 1:
        best = max((x for x in samples if x != reference), key=lambda x: measured[x].speedup)
        m = measured[best]
        reasons.append(
            f"none beat {reference} beyond the noise (best {best} {m.speedup:.2f}x, noise "
            f"{m.noise:.0%}, faster in {m.faster_rounds}/{rounds} rounds); ties go to {reference}"
        )
    return Choice(chosen, reference, measured, "; ".join(reasons) or "the only candidate")


def hopeless(samples: Mapping[str, Sequence[float]], *, total_rounds: int) -> dict[str, str]:
    """The candidates `choose` can no longer take, whatever the rounds still to come: label ->
    why. For stopping a probe early: a setting slower in its first rounds is not timed on.

    `samples`: per-round seconds of the candidates still timed, rounds aligned, all with the
    same number r of rounds so far; `total_rounds`: how many rounds `choose` will see in all
    (the probe's rounds times the ranks pooled). A candidate X can be taken only by beating the
    setting chosen before its pass: the reference, or, for a bf16 X, an fp32 candidate that can
    still beat the reference. Beating C needs X faster than C in `rounds_needed(total_rounds)`
    rounds, so once X was not faster than C in more rounds than total_rounds allows to spare,
    for every such C, it cannot be taken. Fewer than 5 rounds in all: nothing can leave the
    reference, so everything else is hopeless. The reference never is.
    """
    _check_samples(samples)
    kinds = {label: Candidate.from_label(label) for label in samples}
    reference = reference_of(samples)
    needed = rounds_needed(total_rounds)
    spare = -1 if needed is None else total_rounds - needed

    def lost(a: str, b: str) -> int:  # rounds in which a was not faster than b
        return sum(ta >= tb for ta, tb in zip(samples[a], samples[b], strict=True))

    out: dict[str, str] = {}
    for bf16 in (False, True):
        rivals = [reference] + [
            label
            for label in samples
            if bf16 and not kinds[label].bf16 and label != reference and label not in out
        ]
        for label in samples:
            if kinds[label].bf16 is not bf16 or label == reference:
                continue
            losses = {c: lost(label, c) for c in rivals}
            if all(n > spare for n in losses.values()):
                rounds = len(samples[label])
                speedup = _versus(samples[label], samples[reference]).speedup
                against = ", ".join(f"{c} in {n}/{rounds}" for c, n in losses.items())
                out[label] = (
                    f"{speedup:.2f}x {reference}, stopped after {rounds} of {total_rounds} "
                    + (
                        f"rounds: not faster than {against}, needs {needed}"
                        if needed is not None
                        else "rounds: so few cannot show a gain"
                    )
                )
    return out
