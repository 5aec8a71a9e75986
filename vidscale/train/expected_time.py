"""How long a run's training steps will take, said before the first one.

The fast-path probe (`fastpath.probe`) times the run's own forward + backward pass at its
per-process micro-batch and clip shape on this machine, in the setting the run then trains
with; that time, times the micro-batches still to run, is the estimate. It counts the model's
arithmetic only: the optimizer step, the all-reduce where it is not hidden behind the backward
pass, waiting for data, evaluation and checkpoints come on top, and multigrid's phases change
the shape (docs/benchmarks.md, "The demo on an AVX2-only CPU", measures the difference).
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
    micro = f" x {accumulate} micro-batches" if accumulate > 1 else ""
    return (
        f"expected: about {_duration(seconds)} of training steps on this machine ({steps} steps"
        f"{micro} x {measured['seconds']:.3g} s, the probe's forward + backward in "
        f"{decision.candidate.label}; evaluation, data and the optimizer come on top)"
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
