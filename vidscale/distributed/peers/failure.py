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

A rank can also lose its peers without any exception: its network link goes down, and its
collectives and store requests wait on TCP retransmissions until the collective timeout. The
watcher therefore keeps heartbeats (`heartbeats`): a ring neighbour silent for `silence_s`
seconds (`dist.peer_silence_s`, 30 by default) is lost, and a store request unanswered for as
long means the store is out of reach. Either way the rank posts, or says, one line naming
itself, what it lost and the phase the run was in (`FailureWatch.phase`, which the trainer
points at its watchdog's current unit), e.g.

    vidscale: rank 0 lost rank 1 (no heartbeat for 30 s) in step 6 of epoch 2; stopping rank 0
    vidscale: rank 1 lost the store in torchrun's agent (no answer for 30 s) in step 6 of epoch
    2; stopping rank 1

and ends as above; a rank that lost the store under a torchrun agent with no restart left
ends that agent too (`end_stranded_agent`), so that a node cut off from the others ends all its
processes on its own. A launcher that restarts the group (torchrun `--max-restarts`, a SLURM
requeue) then resumes from the last checkpoint once the link is back. The silence is at least
four polls, so that a slow poll interval at scale cannot turn into a false alarm.

Every rank must enter the same sequence of blocks (one per `train()`); on one process the
block does nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch.distributed as dist

from vidscale.distributed.env import DistEnv, group_store
from vidscale.distributed.peers.heartbeats import Beats, neighbours

T = TypeVar("T")

PEER_FAILED_EXIT_CODE = 1
DEFAULT_POLL_S = 0.5
DEFAULT_SILENCE_S = 30.0
# Store requests per poll: the failure check, this rank's heartbeat, two neighbours' counters.
_OPS_PER_POLL = 4
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


class FailureWatch:
    """What `fail_together` yields: `phase` names what the rank is doing, for the line a lost
    peer prints (" in step 6 of epoch 2"); the trainer points it at its watchdog."""

    def __init__(self) -> None:
        self.phase: Callable[[], str] = lambda: ""


@contextmanager
def fail_together(
    env: DistEnv,
    *,
    expected: tuple[type[BaseException], ...] = (),
    poll_s: float | None = None,
    silence_s: float = DEFAULT_SILENCE_S,
) -> Iterator[FailureWatch]:
    """Run the block so that an exception on any rank, or a rank cut off from the others,
    ends every rank promptly (see module).

    The exception itself propagates unchanged on the rank that raised it. Requires
    `init_distributed` when `env.distributed`; a no-op on one process. `poll_s` defaults to
    `poll_interval(env.world_size)`; a peer or the store silent for `silence_s` seconds (at
    least four polls) is lost.
    """
    global _blocks_entered
    handle = FailureWatch()
    if not env.distributed:
        yield handle
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
        silence_s=max(silence_s, 4 * poll_s),
        hosted_here=info.hosted_here,
        store_host="torchrun's agent" if info.in_agent else "rank 0",
        handle=handle,
    )
    watch.start()
    try:
        yield handle
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


# Beyond its polls, what a rank's line may take on a loaded machine (a thread's wake-up, the
# write). And once the ranks have stopped, what ending the job takes, torchrun's agents included:
# an agent sees its worker gone within its monitor interval (0.1 s by default, 0.5 s in netlab)
# and takes about 2 s to tear down and exit, longer on a loaded machine (the SLURM test's job
# ended 8.86 s after the link went down, 5 s of silence, at a load average of 20 on 2 cores);
# the launcher then ends the agents left (`srun --kill-on-bad-exit` at once, `netlab.nodes`
# after 1 s), and an agent whose node is cut off is ended by its own rank.
STOP_SLACK_S = 1.0
JOB_END_AFTER_STOP_S = 5.0


def stop_bound_s(silence_s: float, world_size: int) -> float:
    """Seconds from a link going down to every rank's line and exit (docs/resilience.md, "A
    network link that goes down"): the silence (at least four polls), one poll, one more where
    there are more than two ranks, and `STOP_SLACK_S`. A neighbour counts as silent from its
    last heartbeat seen, which is before the link went down; a store request that hangs was sent
    a poll after it at most; ranks that are not the lost one's neighbours learn of it from a
    neighbour's report, at their next poll."""
    poll = poll_interval(world_size)
    polls = 1 if world_size <= 2 else 2
    return max(silence_s, 4 * poll) + polls * poll + STOP_SLACK_S


def job_end_bound_s(silence_s: float, world_size: int) -> float:
    """Seconds from a link going down to the end of the whole job, every torchrun agent
    included, when the launcher ends a failed job's other tasks (`srun --kill-on-bad-exit`,
    `netlab.nodes`): `stop_bound_s` plus `JOB_END_AFTER_STOP_S`."""
    return stop_bound_s(silence_s, world_size) + JOB_END_AFTER_STOP_S


def poll_interval(world_size: int, *, reads_per_s: float = STORE_READS_PER_S) -> float:
    """Seconds between one rank's failure polls: `DEFAULT_POLL_S`, or longer where
    `world_size` ranks polling that often (`_OPS_PER_POLL` requests each) would send the store
    more than `reads_per_s` requests a second (1,000 ranks: 20 s, inside any collective
    timeout)."""
    if world_size < 1 or reads_per_s <= 0:
        raise ValueError(f"world_size >= 1 and reads_per_s > 0, got {world_size}, {reads_per_s}")
    return max(DEFAULT_POLL_S, world_size * _OPS_PER_POLL / reads_per_s)


def _describe(exc: BaseException) -> str:
    """One line: the exception's type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _stderr(line: str) -> None:
    # os.write, not print: the main thread may hold sys.stderr's lock, and this line must get
    # out before os._exit.
    os.write(2, (line + "\n").encode(errors="replace"))


class _Unanswered(Exception):
    """A store request got no answer in time (the store's host is out of reach)."""


def _within(timeout_s: float, call: Callable[[], T]) -> T:
    """`call()`, or `_Unanswered` after `timeout_s`: a store request to a host whose link is
    down waits on TCP retransmissions (for minutes) whatever the store's own timeout, so it
    runs on a thread of its own that is abandoned (a daemon) if it never returns."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    worker = threading.Thread(target=run, name="vidscale-store-request", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise _Unanswered
    if error:
        raise error[0]
    return result[0]


class _Watch:
    """One rank's side of one `fail_together` block."""

    def __init__(
        self,
        store: dist.Store,
        *,
        prefix: str,
        env: DistEnv,
        poll_s: float,
        silence_s: float,
        hosted_here: bool,
        store_host: str,
        handle: FailureWatch,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.failed_key = prefix + "failed"
        self.left_key = prefix + "left"
        self.env = env
        self.poll_s = poll_s
        self.silence_s = silence_s
        self.hosted_here = hosted_here
        self.store_host = store_host
        self.handle = handle
        self.beats = Beats(neighbours(env.rank, env.world_size))
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
            first = self._post(mine)
        except (dist.DistError, _Unanswered) as err:
            why = "no answer" if isinstance(err, _Unanswered) else _describe(err)
            _stderr(f"vidscale: rank {self.env.rank} could not report its failure: {why}")
            return False, False
        if first != mine:
            _stderr(f"vidscale: {first}; stopping rank {self.env.rank}")
            return True, True
        return True, False

    def _post(self, line: str) -> str:
        """Post `line` as the block's failure unless one is there; the one that is."""
        return _within(
            self.silence_s, lambda: self.store.compare_set(self.failed_key, "", line).decode()
        )

    def leave(self, *, linger_s: float) -> None:
        """Count this rank out; the store's host waits (up to `linger_s`) for the others."""
        try:
            _within(self.silence_s, self._count_out)
            deadline = time.monotonic() + linger_s
            while self.hosted_here and time.monotonic() < deadline:
                if _within(self.silence_s, lambda: self.store.add(self.left_key, 0)) >= (
                    self.env.world_size
                ):
                    break
                time.sleep(0.05)
        except (dist.DistError, _Unanswered):
            pass  # the store is gone or out of reach: nobody is left to wait for

    def _count_out(self) -> None:
        self.store.set(f"{self.prefix}done/{self.env.rank}", "1")  # before `left`: not missed
        self.store.add(self.left_key, 1)

    def _poll(self) -> str | None:
        """One poll: another rank's failure line, this rank's own when it finds a neighbour
        silent (posted for every rank), or None while all is well."""
        store = self.store
        if store.check([self.failed_key]):
            return str(store.get(self.failed_key).decode())
        store.add(f"{self.prefix}beat/{self.env.rank}", 1)
        now = time.monotonic()
        for peer in self.beats.peers:
            self.beats.saw(peer, store.add(f"{self.prefix}beat/{peer}", 0), now=now)
        silent = self.beats.silent(now=now, silence_s=self.silence_s)
        if silent is None:
            return None
        peer, seconds = silent
        if store.check([f"{self.prefix}done/{peer}"]):
            self.beats.peers = tuple(p for p in self.beats.peers if p != peer)  # left on its own
            return None
        line = (
            f"rank {self.env.rank} lost rank {peer} (no heartbeat for {seconds:.0f} s)"
            f"{self._phase()}"
        )
        return str(store.compare_set(self.failed_key, "", line).decode())

    def _phase(self) -> str:
        phase = self.handle.phase()
        return f" in {phase}" if phase else ""

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            store_lost = True
            try:
                report = _within(self.silence_s, self._poll)
                store_lost = False
            except _Unanswered:
                report = (
                    f"rank {self.env.rank} lost the store in {self.store_host} (no answer for "
                    f"{self.silence_s:.0f} s){self._phase()}"
                )
            except dist.DistError as err:
                report = f"the store in {self.store_host} stopped answering ({_describe(err)})"
            if report is None:
                continue
            if self._stop.is_set():
                return  # this rank is reporting or leaving on its own
            if not store_lost:  # the host need not wait; a store out of reach would cost a poll
                with contextlib.suppress(dist.DistError, _Unanswered):
                    _within(self.poll_s, self._count_out)
            _stderr(f"vidscale: {report}; stopping rank {self.env.rank}")
            flush_standard_streams(timeout_s=2.0)
            if store_lost:
                end_stranded_agent()
            os._exit(PEER_FAILED_EXIT_CODE)


def end_stranded_agent() -> bool:
    """Under torchrun, end this rank's agent (SIGKILL) when the rank has lost the store and the
    agent has no restart left; whether it did. Such an agent can only fail the job, yet it
    would first wait on the same store (each request up to 60 s, deaf to SIGTERM meanwhile),
    for minutes; and where the store is out of reach because this node's link is down, no
    launcher can reach the node to end it either. With restarts left the agent is kept: it
    rendezvouses again once the link is back (docs/resilience.md)."""
    count = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    most = os.environ.get("TORCHELASTIC_MAX_RESTARTS")
    if count is None or most is None or not (count.isdigit() and most.isdigit()):
        return False  # not launched by torchrun
    if int(count) < int(most):
        return False
    agent = os.getppid()
    try:
        with open(f"/proc/{agent}/cmdline", "rb") as handle:
            command = handle.read()
    except OSError:
        return False
    if b"torch.distributed.run" not in command and b"torchrun" not in command:
        return False  # the agent is gone already (this rank was handed to init)
    with contextlib.suppress(ProcessLookupError):
        os.kill(agent, signal.SIGKILL)
    return True


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
