"""Interleaved timing: every callable once per round, round-robin, and how noisy that was.

Shared by `bench models` and the training fast path's start-up probe (`fastpath/probe`):
both compare callables whose differences are smaller than the drift of a shared machine, and
interleaving them makes drift slower than a round hit every callable alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from vidscale.fastpath import hardware


class RoundRobinSamples(NamedTuple):
    """Per timed call: seconds per call, and minor page faults per call (NaN: not counted)."""

    seconds: dict[str, list[float]]
    page_faults: dict[str, list[float]]


def time_round_robin(
    calls: Mapping[str, Callable[[], object]],
    *,
    warmup: int,
    repeats: int,
    steps: int = 1,
    settle: int = 0,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    faults: Callable[[], float] = hardware.minor_page_faults,
    on_round: Callable[[int], None] | None = None,
    on_turn: Callable[[str], None] | None = None,
    drop: Callable[[Mapping[str, Sequence[float]]], Collection[str]] | None = None,
) -> RoundRobinSamples:
    """`repeats` samples of every callable after `warmup` untimed rounds.

    Each round runs every callable `settle` times untimed and then `steps` times timed, in a row
    (one sample: the mean of the timed calls); round r starts at position r mod len(calls), so
    none always runs first (after the pause between rounds) or always after the same neighbour.
    `on_round(r)` is called after round r, `on_turn(key)` before each callable's turn (its
    settle and timed calls), outside the timed region.

    `drop`, if given, is shown the samples of the callables still timed after every timed round
    and returns those to time no more: their samples end where they were dropped (shorter lists
    than the others'), and the timing stops when a drop leaves fewer than two to compare.
    """
    keys = list(calls)
    seconds: dict[str, list[float]] = {k: [] for k in keys}
    page_faults: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(warmup + repeats):
        for j in range(len(keys)):
            key = keys[(r + j) % len(keys)]
            if on_turn is not None:
                on_turn(key)
            for _ in range(settle):
                calls[key]()
            sync()
            f0, t0 = faults(), clock()
            for _ in range(steps):
                calls[key]()
            sync()
            if r >= warmup:
                seconds[key].append((clock() - t0) / steps)
                page_faults[key].append((faults() - f0) / steps)
        if on_round is not None:
            on_round(r)
        if drop is not None and r >= warmup:
            dropped = set(drop({k: seconds[k] for k in keys}))
            keys = [k for k in keys if k not in dropped]
            if dropped and len(keys) < 2:
                break  # nothing left to compare the survivor with
    return RoundRobinSamples(seconds, page_faults)


def spread(samples: Sequence[float]) -> float:
    """Interquartile range over the median: how noisy a timing was (0 with one sample)."""
    if len(samples) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return (q3 - q1) / statistics.median(samples)
