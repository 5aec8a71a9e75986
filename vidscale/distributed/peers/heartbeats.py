"""Which peers a rank listens to, and when one has gone silent (`failure.fail_together`).

A rank that loses its network link neither exits nor closes its sockets: its peers' gloo
collectives wait on TCP retransmissions until the collective timeout (`dist.timeout_s`,
minutes), and so does every store request it sends. Each rank's failure watcher therefore
counts a heartbeat of its own in the launch's store every poll, and reads the counters of its
ring neighbours (rank - 1 and rank + 1, modulo the world size: the peers its all-reduce talks
to directly, and at most two reads per poll whatever the world size). A neighbour whose counter
has not moved for `silence_s` seconds of this rank's clock is lost: counters, not timestamps,
so the nodes' clocks need not agree. A rank that left its block on its own says so in the
store (`done`) and is not missed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def neighbours(rank: int, world_size: int) -> tuple[int, ...]:
    """The ring neighbours of `rank` (one on a world of 2, none alone), in ascending order."""
    return tuple(sorted({(rank - 1) % world_size, (rank + 1) % world_size} - {rank}))


@dataclass
class Beats:
    """The heartbeat counters last seen from each neighbour, and when they last moved."""

    peers: tuple[int, ...]
    started: float = field(default_factory=time.monotonic)
    _last: dict[int, tuple[int, float]] = field(default_factory=dict)

    def saw(self, peer: int, count: int, *, now: float) -> None:
        """Record neighbour `peer`'s counter as read at `now` (monotonic seconds)."""
        previous = self._last.get(peer)
        if previous is None or previous[0] != count:
            self._last[peer] = (count, now)

    def silent(self, *, now: float, silence_s: float) -> tuple[int, float] | None:
        """The first neighbour whose counter has not moved for `silence_s` seconds (counted
        from this rank's start for one never heard), with how long; None when all are alive."""
        for peer in self.peers:
            since = self._last.get(peer, (0, self.started))[1]
            if now - since >= silence_s:
                return peer, now - since
        return None
