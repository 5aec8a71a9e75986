"""What a data-parallel strategy spent on communication: bytes sent and seconds in collectives
(in flight, and exposed: not hidden behind computation)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Traffic:
    """Communication of one rank over some interval (a step, an averaging, an epoch).

    `bytes_sent`: bytes this rank put into collectives. `seconds`: wall-clock seconds during
    which at least one of its collectives was in flight (overlapping collectives count once;
    time that overlaps computation, as DDP's bucketed all-reduce does, is included).
    `rounds`: synchronisations (DDP: synchronised optimizer steps; AAVG: model averagings).
    `exposed_seconds`: the part of `seconds` that the training thread spent waiting for
    communication (or running the hooks that prepare it) instead of computing: for DDP, time in
    the gradient hooks plus the wait from the last bucket's readiness (the end of the backward
    compute) to the end of the last all-reduce; for a blocking collective (AAVG's averaging),
    all of it. This is the communication that scaling efficiency pays for (TSM paper §3c).
    """

    bytes_sent: int = 0
    seconds: float = 0.0
    rounds: int = 0
    exposed_seconds: float = 0.0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.bytes_sent + other.bytes_sent,
            self.seconds + other.seconds,
            self.rounds + other.rounds,
            self.exposed_seconds + other.exposed_seconds,
        )
