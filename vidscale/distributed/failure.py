"""Fail together: an exception on one rank stops every rank within seconds.

Without it, the other ranks learn of a failure only through their collectives. With gloo, a
rank that raises and exits closes its sockets, and a peer waiting in an all-reduce raises
"Connection closed by peer" within a second (measured, with and without torchrun). But
nothing reaches the peers while the failing rank is still alive: cleaning up, moving on to
the next run of a sweep, or gone while a child it forked (a data loader worker) still holds
copies of its sockets; they then wait until the process group timeout (`dist.timeout_s`) or
until the launcher kills them. NCCL notices a dead peer only at that timeout.

    with fail_together(env, expected=(Preempted, Diverged)):
        ...  # the whole run

Inside the block, each rank runs a daemon thread that polls the launch's store (its own client
connection, see `vidscale.distributed.env.GroupStore`) every `poll_s` seconds (by default
`poll_interval(world_size)`: 0.5 s, longer from 100 ranks on, so that one store serves at
most `STORE_READS_PER_S` of these reads: 2,304 ranks polling every 0.5 s would send it 4,600
a second on top of the launch's own traffic). A rank whose
block raises posts `rank R failed (reason)` to the store before the exception leaves the
block; every other rank's thread sees it, writes one line to stderr

    vidscale: rank 0 failed (OSError: ...); stopping rank 1

and ends its process with `PEER_FAILED_EXIT_CODE` (`os._exit`: its main thread may be blocked
in a collective that will never finish; checkpoints are written atomically, so none is left
half-written). A store that stops answering ends the rank the same way: without torchrun it
lives in rank 0, which then died without reporting (SIGKILL, out of memory); under torchrun it
lives in the agent. Exceptions listed in `expected` are raised by every rank at the same point
(the run stops by agreement), so they are not reported. A rank whose own exception comes after
another rank's report (a gloo collective's "Connection closed by peer" can beat the watcher's
next poll) says the same one line and exits with `PEER_FAILED_EXIT_CODE` too, its exception
(a consequence, not a cause) left out.

Every rank must enter the same sequence of blocks (one per `train()`); on one process the
block does nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist

from vidscale.distributed.env import DistEnv, group_store

PEER_FAILED_EXIT_CODE = 1
DEFAULT_POLL_S = 0.5
# A ceiling on the failure polls' reads of the one store all ranks share (a single server that
# the launch's rendezvous and barriers also use); its real capacity is not measured here.
STORE_READS_PER_S = 200.0
# A store answers in milliseconds; one that has not answered for this long is gone.
_STORE_OP_TIMEOUT_S = 30.0
# How long the process that hosts the store waits, before it ends, for the other ranks to
# leave their blocks: after a clean end (they are at most seconds behind) and after a failure
# (their threads read the report within a poll). Without the wait, a rank still inside its
# block would find the store gone and report a failure.
_LINGER_CLEAN_S = 60.0
_LINGER_FAILED_POLLS = 6

_blocks_entered = 0


@contextmanager
def fail_together(
    env: DistEnv,
    *,
    expected: tuple[type[BaseException], ...] = (),
    poll_s: float | None = None,
) -> Iterator[None]:
    """Run the block so that an exception on any rank ends every rank promptly (see module).

    The exception itself propagates unchanged on the rank that raised it. Requires
    `init_distributed` when `env.distributed`; a no-op on one process. `poll_s` defaults to
    `poll_interval(env.world_size)`.
    """
    global _blocks_entered
    if not env.distributed:
        yield
        return
    if poll_s is None:
        poll_s = poll_interval(env.world_size)
    info = group_store()
    if info is None:
        raise RuntimeError("fail_together needs a process group joined by init_distributed()")
    _blocks_entered += 1
    watch = _Watch(
        info.connect(timeout_s=_STORE_OP_TIMEOUT_S),
        prefix=f"failure/{_blocks_entered}/",
        env=env,
        poll_s=poll_s,
        hosted_here=info.hosted_here,
        store_host="torchrun's agent" if info.in_agent else "rank 0",
    )
    watch.start()
    try:
        yield
    except BaseException as exc:
        watch.stop()
        if isinstance(exc, expected) or (isinstance(exc, SystemExit) and not exc.code):
            watch.leave(linger_s=_LINGER_CLEAN_S)
        else:
            reachable, consequence = watch.report(exc)
            if reachable:
                watch.leave(linger_s=_LINGER_FAILED_POLLS * poll_s)
            if consequence:  # another rank failed first: its line is the one that matters
                raise SystemExit(PEER_FAILED_EXIT_CODE) from None
        raise
    watch.stop()
    watch.leave(linger_s=_LINGER_CLEAN_S)


def poll_interval(world_size: int, *, reads_per_s: float = STORE_READS_PER_S) -> float:
    """Seconds between one rank's failure polls: `DEFAULT_POLL_S`, or longer where
    `world_size` ranks polling that often would read the store more than `reads_per_s` times
    a second (1,000 ranks: 5 s, still far inside any collective timeout)."""
    if world_size < 1 or reads_per_s <= 0:
        raise ValueError(f"world_size >= 1 and reads_per_s > 0, got {world_size}, {reads_per_s}")
    return max(DEFAULT_POLL_S, world_size / reads_per_s)


def _describe(exc: BaseException) -> str:
    """One line: the exception's type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _stderr(line: str) -> None:
    # os.write, not print: the main thread may hold sys.stderr's lock, and this line must get
    # out before os._exit.
    os.write(2, (line + "\n").encode(errors="replace"))


class _Watch:
    """One rank's side of one `fail_together` block."""

    def __init__(
        self,
        store: dist.Store,
        *,
        prefix: str,
        env: DistEnv,
        poll_s: float,
        hosted_here: bool,
        store_host: str,
    ) -> None:
        self.store = store
        self.failed_key = prefix + "failed"
        self.left_key = prefix + "left"
        self.env = env
        self.poll_s = poll_s
        self.hosted_here = hosted_here
        self.store_host = store_host
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="vidscale-fail-together", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread (within one poll) before this rank posts anything of its own."""
        self._stop.set()
        self._thread.join()

    def report(self, exc: BaseException) -> tuple[bool, bool]:
        """Post this rank's failure, unless another rank's is there already (the root cause:
        this exception is then most likely its consequence, e.g. a closed connection, and this
        rank says the other's line, as its watcher would have). Returns (the store answered,
        another rank failed first)."""
        mine = f"rank {self.env.rank} failed ({_describe(exc)})"
        try:
            first = self.store.compare_set(self.failed_key, "", mine).decode()
        except dist.DistError as err:
            _stderr(
                f"vidscale: rank {self.env.rank} could not report its failure: {_describe(err)}"
            )
            return False, False
        if first != mine:
            _stderr(f"vidscale: {first}; stopping rank {self.env.rank}")
            return True, True
        return True, False

    def leave(self, *, linger_s: float) -> None:
        """Count this rank out; the store's host waits (up to `linger_s`) for the others."""
        try:
            left = self.store.add(self.left_key, 1)
            deadline = time.monotonic() + linger_s
            while self.hosted_here and left < self.env.world_size:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
                left = self.store.add(self.left_key, 0)
        except dist.DistError:
            pass  # the store is gone: nobody is left to wait for

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                if not self.store.check([self.failed_key]):
                    continue
                report = self.store.get(self.failed_key).decode()
            except dist.DistError as err:
                report = f"the store in {self.store_host} stopped answering ({_describe(err)})"
            if self._stop.is_set():
                return  # this rank is reporting or leaving on its own
            with contextlib.suppress(dist.DistError):  # counted out: the host need not wait
                self.store.add(self.left_key, 1)
            _stderr(f"vidscale: {report}; stopping rank {self.env.rank}")
            flush_standard_streams(timeout_s=2.0)
            os._exit(PEER_FAILED_EXIT_CODE)


def flush_standard_streams(*, timeout_s: float) -> None:
    """Flush stdout and stderr, giving up after `timeout_s`: a main thread blocked while
    writing to a pipe nobody reads would hold their locks for ever."""

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing to save
                stream.flush()

    flusher = threading.Thread(target=flush, name="vidscale-flush", daemon=True)
    flusher.start()
    flusher.join(timeout_s)
