"""How long a run will take: said before the first step, and after every epoch.

Before the first step: the fast-path probe (`fastpath.probe`) times the run's own forward +
backward pass at its per-process micro-batch and clip shape on this machine, in the setting the
run then trains with; that time, times the micro-batches still to run, is the least the training
steps take. The optimizer step, the all-reduce where it is not hidden behind the backward pass,
waiting for data, evaluation and checkpoints come on top (the demo took 1.6-1.9x the estimate
on 2 cores, docs/benchmarks.md, "The demo on an AVX2-only CPU"), and multigrid's phases change
the shape. After each epoch the run log adds the time left at that epoch's pace (`duration`).
"""

from __future__ import annotations

from vidscale.fastpath.probe import FastPathDecision


def expected_training_time(
    decision: FastPathDecision, *, steps: int, accumulate: int
) -> str | None:
    """One line for the log, or None where nothing was timed (explicit settings, a resumed
    run's record without samples)."""
    measured = decision.measured.get(decision.candidate.label)
    if measured is None or steps <= 0:
        return None
    seconds = measured["seconds"] * steps * accumulate
    micro = f" of {accumulate} micro-batches" if accumulate > 1 else ""
    return (
        f"expected: at least {duration(seconds)} for the {steps} steps{micro} on this machine "
        f"({measured['seconds']:.3g} s each, the probe's forward + backward in "
        f"{decision.candidate.label}; the optimizer, data and evaluation come on top, and each "
        "epoch's line says the time left at its pace)"
    )


def duration(seconds: float) -> str:
    """`seconds` for a person: 0.4 s, 45 s, 4.2 min, 1.5 h."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
