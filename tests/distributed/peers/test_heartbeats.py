"""Heartbeat bookkeeping of the failure watcher: which neighbours, and when one is silent."""

from __future__ import annotations

from vidscale.distributed.peers.heartbeats import Beats, neighbours


def test_neighbours_are_the_ring_neighbours() -> None:
    assert neighbours(0, 1) == ()
    assert neighbours(0, 2) == (1,) and neighbours(1, 2) == (0,)
    assert neighbours(0, 8) == (1, 7)
    assert neighbours(5, 8) == (4, 6)


def test_a_neighbour_is_silent_only_when_its_counter_stops_moving() -> None:
    beats = Beats((1, 3), started=100.0)
    beats.saw(1, 1, now=100.5)
    beats.saw(3, 1, now=100.5)
    assert beats.silent(now=110.0, silence_s=30.0) is None
    for t in range(101, 140):  # rank 1 keeps counting; rank 3 stops at 1
        beats.saw(1, t, now=float(t))
        beats.saw(3, 1, now=float(t))
    assert beats.silent(now=130.0, silence_s=30.0) is None  # 29.5 s since rank 3 moved
    assert beats.silent(now=131.0, silence_s=30.0) == (3, 30.5)


def test_a_neighbour_never_heard_is_counted_from_the_start() -> None:
    beats = Beats((1,), started=50.0)
    assert beats.silent(now=79.0, silence_s=30.0) is None
    assert beats.silent(now=80.0, silence_s=30.0) == (1, 30.0)
