"""Shared integers: a value set after a worker started is what the worker reads."""

import multiprocessing as mp
from multiprocessing.connection import Connection

from vidscale.data.epoch_state import SharedInts


def _report_when_asked(values: SharedInts, conn: Connection) -> None:
    conn.recv()  # wait until the parent has changed the values
    conn.send((values[0], values[1]))


def test_values_set_after_a_process_started_reach_it() -> None:
    values = SharedInts(2)
    assert (values[0], values[1]) == (0, 0)
    parent, child = mp.get_context("fork").Pipe()
    worker = mp.get_context("fork").Process(target=_report_when_asked, args=(values, child))
    worker.start()
    values[0], values[1] = 7, 3
    parent.send("go")
    assert parent.recv() == (7, 3)
    worker.join(timeout=30)
    assert worker.exitcode == 0
