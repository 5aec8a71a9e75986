"""What a data-parallel strategy spent on communication: bytes sent and seconds in collectives."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Traffic:
    """Communication of one rank over some interval (a step, an averaging, an epoch).

    `bytes_sent`: bytes this rank put into collectives. `seconds`: wall-clock seconds during
    which at least one of its collectives was in flight (overlapping collectives count once;
    time that overlaps computation, as DDP's bucketed all-reduce does, is included).
    `rounds`: synchronisations (DDP: synchronised optimizer steps; AAVG: model averagings).
    """

    bytes_sent: int = 0
    seconds: float = 0.0
    rounds: int = 0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.bytes_sent + other.bytes_sent,
            self.seconds + other.seconds,
            self.rounds + other.rounds,
        )
