"""Hang detection: a rank whose step, evaluation or checkpoint stops progressing ends itself.

Without it, a stalled rank (a hung file read, a wedged decoder, a kernel that never returns)
holds every rank in its next collective for `dist.timeout_s` and the run then fails without
saying where it stood. With it, each rank runs a daemon thread that knows what the main thread
is doing (`Watchdog.watching`: one optimizer step, one evaluation batch, one checkpoint) and
since when. A unit that has not finished within its bound (`HangBounds`) is a hang; the thread
then

- writes every thread's Python stack of this process to `RUN/hangs/rank{R}-{time}.txt`,
  headed by the phase, the wait and the bound, and the state of each loader worker
  (`/proc/PID/stat`: a worker stopped or in uninterruptible sleep shows there);
- asks the loader workers for their stacks (`STACKS_SIGNAL`, registered by
  `vidscale.data.loaders.init_worker`); a worker that can still run Python writes them to the
  rank's stderr, one that is stopped or blocked outside Python cannot;
- appends one JSON line (rank, phase, waited_s, bound_s, stacks file) to `RUN/hangs/hangs.jsonl`;
- prints one line, e.g.
  `vidscale: rank 1 hung in step 7 of epoch 4: no progress for 12.3 s (bound 10.0 s); ...`;
- ends its loader workers (SIGKILL: a stopped or wedged one would outlive the rank) and then
  the process, with `HANG_EXIT_CODE` through `os._exit`, since the main thread is stuck.

torchrun then stops the rest of the group and, with `--max-restarts`, starts it again; the new
group resumes from the last checkpoint (`train.checkpoints.resume`), exactly.

Who detects. A rank that is alive but stuck (its step waits on a loader worker that stopped,
a read that never returns) detects its own hang. A rank that cannot run at all (SIGSTOP,
a frozen host) cannot run its watchdog either; its peers can: they block in the step's
all-reduce on it, so their own step stops progressing and their watchdogs fire after the same
bound. Their report shows the collective they wait in. torchrun, stopping the group after
that exit, sends SIGTERM to each rank's process group and SIGKILL when it has not ended 30 s
later (torchrun's fixed grace): a stopped rank ends at the SIGKILL, a live one at once.

The bound. A unit of a kind is bounded by max(`train.hang_floor_s`, `train.hang_factor` x the
slowest completed unit of that kind), measured in this run. The first unit of a kind, and a
step at a clip shape not run before (multigrid), includes start-up costs (worker start-up,
kernel selection, compilation): it is bounded by `FIRST_UNIT_FACTOR` times that, and its time
is not taken as a measure. 0 in either setting disables the watchdog. Only the units are
watched: start-up, precise BN and the work between units are bounded by `dist.timeout_s`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from torch.utils.data import DataLoader

from vidscale.config import RunConfig
from vidscale.data.loaders import STACKS_SIGNAL, worker_pids
from vidscale.distributed.env import DistEnv
from vidscale.distributed.peers.failure import flush_standard_streams

# As timeout(1) exits when its command ran past its limit. Any non-zero exit makes torchrun
# restart the group while it has restarts left.
HANG_EXIT_CODE = 124
FIRST_UNIT_FACTOR = 5.0
# How long each loader worker is given to write its stacks before the next is asked.
_WORKER_STACKS_WAIT_S = 0.3

T = TypeVar("T")


@dataclass
class HangBounds:
    """How long each unit of work may take before it counts as a hang (see module)."""

    floor_s: float
    factor: float
    first_factor: float = FIRST_UNIT_FACTOR
    slowest: dict[str, float] = field(default_factory=dict)  # seconds, per kind
    seen: set[tuple[str, Hashable]] = field(default_factory=set)  # (kind, key) run once

    @property
    def enabled(self) -> bool:
        return self.floor_s > 0 and self.factor > 0

    def bound(self, kind: str, key: Hashable = None) -> float:
        """Seconds the next unit of `kind` (at `key`, e.g. a step's clip shape) may take."""
        slowest = self.slowest.get(kind)
        base = self.floor_s if slowest is None else max(self.floor_s, self.factor * slowest)
        return base if (kind, key) in self.seen else base * self.first_factor

    def completed(self, kind: str, key: Hashable, seconds: float) -> None:
        """A unit finished in `seconds`; the first at (`kind`, `key`) is not a measure."""
        if (kind, key) not in self.seen:
            self.seen.add((kind, key))
            return
        self.slowest[kind] = max(self.slowest.get(kind, 0.0), seconds)


@dataclass(frozen=True)
class Unit:
    """The unit of work the main thread is in: since `started` (monotonic), for `bound_s`."""

    kind: str
    what: str  # the phase as the report names it: "step 7 of epoch 4"
    key: Hashable
    started: float
    bound_s: float


class Watch:
    """One watched block; `progressed()` ends one unit and starts the next (evaluation
    batches), and the block's end ends the last."""

    def __init__(self, watchdog: Watchdog, kind: str, what: str, key: Hashable) -> None:
        self.watchdog, self.kind, self.what, self.key = watchdog, kind, what, key
        self._begin(time.monotonic())

    def _begin(self, now: float) -> None:
        bound = self.watchdog.bounds.bound(self.kind, self.key)
        self.watchdog.unit = Unit(self.kind, self.what, self.key, now, bound)

    def end(self) -> float:
        """Record the current unit's time; returns the time it ended."""
        now = time.monotonic()
        unit = self.watchdog.unit
        if unit is not None:
            self.watchdog.bounds.completed(self.kind, self.key, now - unit.started)
        return now

    def progressed(self) -> None:
        self._begin(self.end())

    def each(self, items: Iterable[T]) -> Iterator[T]:
        """`items`, each one's arrival counted as progress."""
        for item in items:
            self.progressed()
            yield item


class Watchdog:
    """One rank's hang detection (see module): `watching` marks the units, `running` runs the
    thread that ends the process when one stalls."""

    def __init__(
        self,
        bounds: HangBounds,
        *,
        rank: int,
        hangs_dir: Path,
        workers: Callable[[], list[int]] = list,
        poll_s: float | None = None,
    ) -> None:
        self.bounds, self.rank, self.hangs_dir, self.workers = bounds, rank, hangs_dir, workers
        # Detection within a tenth of the smallest bound, and no busier than once a second.
        self.poll_s = poll_s if poll_s is not None else min(1.0, max(bounds.floor_s / 10, 0.05))
        self.unit: Unit | None = None  # replaced whole by the main thread, read by the watcher

    @classmethod
    def for_run(cls, cfg: RunConfig, run_dir: Path, env: DistEnv, *loaders: DataLoader) -> Watchdog:
        """The run's watchdog: bounds from `train.hang_floor_s` / `train.hang_factor`, reports
        in `run_dir/hangs`, the workers of `loaders` asked for their stacks."""
        return cls(
            HangBounds(cfg.train.hang_floor_s, cfg.train.hang_factor),
            rank=env.rank,
            hangs_dir=run_dir / "hangs",
            workers=lambda: [pid for loader in loaders for pid in worker_pids(loader)],
        )

    @classmethod
    def disabled(cls) -> Watchdog:
        """One that measures its units but never runs (a piece used outside a run)."""
        return cls(HangBounds(0.0, 0.0), rank=0, hangs_dir=Path("hangs"))

    def phase(self) -> str:
        """What the main thread is in ("step 7 of epoch 4"), or "" between units."""
        unit = self.unit
        return "" if unit is None else unit.what

    @contextmanager
    def watching(self, kind: str, what: str, key: Hashable = None) -> Iterator[Watch]:
        """The block is one unit of `kind` (or several, see `Watch.progressed`)."""
        outer = self.unit
        watch = Watch(self, kind, what, key)
        try:
            yield watch
        finally:
            watch.end()
            self.unit = outer

    @contextmanager
    def running(self) -> Iterator[None]:
        """Watch for hangs while the block runs (nothing when the bounds are disabled)."""
        if not self.bounds.enabled:
            yield
            return
        stop = threading.Event()
        thread = threading.Thread(
            target=self._watch, args=(stop,), name="vidscale-hang-watchdog", daemon=True
        )
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(self.poll_s):
            unit = self.unit
            if unit is None:
                continue
            waited = time.monotonic() - unit.started
            if waited > unit.bound_s:
                self._end_hung(unit, waited)

    def _end_hung(self, unit: Unit, waited: float) -> None:
        """Report the hang (see module) and end the process."""
        workers = self.workers()
        try:
            where = f"stacks in {self.report(unit, waited, workers)}"
        except OSError as err:  # a full or gone disk must not keep the rank alive
            where = f"no stacks written ({err})"
        for pid in workers:  # a stopped or wedged worker would outlive this process
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _stderr(
            f"vidscale: rank {self.rank} hung in {unit.what}: no progress for {waited:.1f} s "
            f"(bound {unit.bound_s:.1f} s); {where}; exiting with {HANG_EXIT_CODE} so that "
            "the launcher restarts the group from the last checkpoint"
        )
        flush_standard_streams(timeout_s=2.0)
        os._exit(HANG_EXIT_CODE)

    def report(self, unit: Unit, waited: float, workers: list[int]) -> Path:
        """Write this process's stacks, and ask the loader `workers` (pids) for theirs;
        returns the file."""
        self.hangs_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.hangs_dir / f"rank{self.rank}-{stamp}.txt"
        with path.open("w") as out:
            out.write(
                f"rank {self.rank} (pid {os.getpid()} on {socket.gethostname()}) hung in "
                f"{unit.what}: no progress for {waited:.1f} s, bound {unit.bound_s:.1f} s\n"
            )
            for pid in workers:
                out.write(f"loader worker pid {pid}: {_process_state(pid)}\n")
            if workers:
                out.write("(the workers that can still run Python print their stacks to stderr)\n")
            out.write("\n")
            out.flush()  # faulthandler writes to the descriptor, past Python's buffer
            faulthandler.dump_traceback(out, all_threads=True)
        for pid in workers:  # one at a time: stacks written together interleave on stderr
            with contextlib.suppress(OSError):  # already gone
                os.kill(pid, STACKS_SIGNAL)
                time.sleep(_WORKER_STACKS_WAIT_S)
        record = {
            "rank": self.rank,
            "kind": unit.kind,
            "phase": unit.what,
            "waited_s": round(waited, 3),
            "bound_s": round(unit.bound_s, 3),
            "time": time.time(),
            "stacks": path.name,
        }
        with (self.hangs_dir / "hangs.jsonl").open("a") as log:
            log.write(json.dumps(record) + "\n")
        return path


def _process_state(pid: int) -> str:
    """The kernel's state letter of `pid` (Linux /proc; "unknown" elsewhere or once gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "state unknown"
    state = stat.rsplit(")", 1)[-1].split()[0]  # after "(command name)", which may hold spaces
    names = {"R": "running", "S": "sleeping", "D": "uninterruptible sleep", "T": "stopped"}
    return f"state {state} ({names.get(state, 'other')})"


def _stderr(line: str) -> None:
    # os.write, not print: the main thread may hold sys.stderr's lock.
    os.write(2, (line + "\n").encode(errors="replace"))
