"""The fast-path probe in a child process: a setting that hangs or crashes is left out, the run
goes on.

The probe (`fastpath.probe`) runs settings the run may never train with, and some of
them fail in the libraries below torch on some machines. Seen on a 2-core AMX Xeon with torch
2.13's oneDNN: SlowFast-R50 4x16 at 224² aborted the process in bf16 (heap corruption in a
time-strided bf16 convolution), and I3D-R50 3x3x3 at 224², batch 1, spun without end in the
bf16 backward-weights convolution when its bf16 step followed an fp32 step in the same process,
though each setting alone stepped (docs/benchmarks.md, "`auto` vs fp32 at 224²"). In the
training process either failure ends the run before its first step, and the fixed `auto` would
hang or crash every start.

So the probe runs in a child process (`spawn`: a fresh interpreter, nothing inherited from the
run's threads). The child tells the parent before each candidate's turn; the parent gives a
turn `HangLimits.turn_s` seconds. A candidate whose turn crashes the child (a signal, an exit
without a result), does not end in time, or raises, is named with what happened and the probe
is run again without it, until one completes. The reference candidate (`candidates`' first:
the least change) failing is an error: the model cannot train at this shape. Its samples are
the in-process probe's, so `choose` reads them as before.

Costs: one interpreter start per probe; a hang costs its limit once, after which the decision
is cached (`fastpath.cache`) with the failure recorded.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

import torch
from torch import nn

from vidscale.errors import InputError
from vidscale.fastpath.host_memory import set_host_memory_retention
from vidscale.fastpath.settings import Candidate, set_device_options
from vidscale.fastpath.trials import PROBE, ProbeSettings, ProbeShape, Timed, probe


@dataclass(frozen=True)
class HangLimits:
    """Seconds the parent waits. `start_s`: for the child to import, build the model and begin
    its first turn. A turn (one candidate's settle + timed steps) gets `first_turn_s` while no
    turn has finished (the first includes the kernels' first-call set-up), then `factor` times
    the longest finished turn, at least `floor_s`: a bf16 candidate's first turn, with its own
    set-up, stays well inside 10 times an fp32 turn here, a hang never ends."""

    start_s: float = 600.0
    first_turn_s: float = 600.0
    factor: float = 10.0
    floor_s: float = 60.0

    def turn_s(self, longest: float) -> float:
        return self.first_turn_s if longest <= 0 else max(self.floor_s, self.factor * longest)


LIMITS = HangLimits()
PROGRESS_EVERY_S = 30.0  # a probe shorter than this (the demo model's) prints no progress


class ProbeFailed(InputError):
    """The reference setting itself failed in the probe: the model cannot train at the run's
    shape and batch on this machine (a `ValueError`, so the command line reports it in one
    line)."""


@dataclass(frozen=True)
class IsolatedProbe:
    """Per-round seconds of the candidates timed in every round (`probe`'s samples), what
    happened to each one left out (label -> e.g. "hung: its turn did not end in 150 s", or
    why its gradients are not fp32's: `trials.wrong_candidates`), and
    why each one ruled out by its first rounds was not timed on (`Timed.dropped`)."""

    samples: dict[str, list[float]]
    failed: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Job:
    build: Callable[[], nn.Module]
    to_time: tuple[Candidate, ...]
    device: str
    shape: ProbeShape
    settings: ProbeSettings
    threads: int
    host_memory: bool
    ranks: int


@dataclass(frozen=True)
class _Failure:
    label: str  # "" when the child failed before any candidate's turn
    what: str


def probe_isolated(
    build: Callable[[], nn.Module],
    to_time: Sequence[Candidate],
    *,
    device: torch.device,
    shape: ProbeShape,
    settings: ProbeSettings = PROBE,
    host_memory: bool = False,
    ranks: int = 1,
    limits: HangLimits = LIMITS,
    progress: Callable[[str], None] | None = None,
) -> IsolatedProbe:
    """`probe` in a child process, run again without each candidate that hangs, crashes or
    raises there. `build` must pickle (a class, a module-level function, or a
    `functools.partial` of one): the child is a fresh interpreter. The child trains as this
    process will: its threads (`torch.get_num_threads()`), `host_memory` (glibc retention, on
    CPU) and the device options; `ranks`: how many processes' samples will be pooled (`probe`).
    Raises `ProbeFailed` when the reference candidate (the first of `to_time`) fails.
    `progress` gets a line at most every `PROGRESS_EVERY_S` seconds while a probe runs long (a
    large model on a CPU steps for seconds: up to 4 settings x 12 steps)."""
    remaining = list(to_time)
    failed: dict[str, str] = {}
    while True:
        outcome = _run_child(
            _Job(
                build,
                tuple(remaining),
                str(device),
                shape,
                settings,
                torch.get_num_threads(),
                host_memory,
                ranks,
            ),
            limits,
            # a gradient check, then the warm-up and timed rounds, per candidate
            _Progress(progress, turns=len(remaining) * (1 + settings.warmup + settings.repeats)),
        )
        if not isinstance(outcome, _Failure):
            return IsolatedProbe(outcome.samples, failed | outcome.wrong, outcome.dropped)
        if outcome.label in ("", remaining[0].label):
            where = f" at {outcome.label}" if outcome.label else ""
            raise ProbeFailed(f"the fast-path probe failed{where} ({outcome.what})")
        failed[outcome.label] = outcome.what
        remaining = [c for c in remaining if c.label != outcome.label]


@dataclass
class _Progress:
    """Turns begun out of `turns`, told to `say` at most every `PROGRESS_EVERY_S`."""

    say: Callable[[str], None] | None
    turns: int
    begun: int = 0
    started: float = field(default_factory=time.monotonic)
    told: float = field(default_factory=time.monotonic)

    def turn(self, label: str) -> None:
        self.begun += 1
        now = time.monotonic()
        if self.say is not None and now - self.told >= PROGRESS_EVERY_S:
            self.told = now
            self.say(
                f"fast path: probe turn {self.begun} of at most {self.turns} ({label}), "
                f"{now - self.started:.0f} s"
            )


def _run_child(job: _Job, limits: HangLimits, progress: _Progress) -> Timed | _Failure:
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_main, args=(sender, job), name="vidscale-fast-path-probe")
    child.daemon = True  # multiprocessing ends it if this process exits normally first
    outcome: Timed | _Failure | None = None
    try:
        start_holding_sigint(child)
        sender.close()  # the child's end: EOF here once the child is gone
        outcome = _follow(child, receiver, limits, progress)
        return outcome
    finally:
        sender.close()
        receiver.close()
        if child.pid is not None:  # started
            if isinstance(outcome, Timed):
                child.join(timeout=10)  # it sent its samples and is leaving
            if child.is_alive():
                child.kill()  # hung, or this process is being interrupted
            child.join()


class _Startable(Protocol):
    def start(self) -> None: ...


def start_holding_sigint(child: _Startable) -> None:
    """`child.start()` with SIGINT held until it returns. `spawn` hands the child its job by
    pickling it down a pipe inside `start()`: a Ctrl-C in the middle would leave the child
    reading a truncated stream, to die with a traceback of its own on the terminal. Held (a
    handler that only notes it, in place of this process's own for the duration), the signal
    is raised again once the child has what it needs, reaching the handler it was meant for
    (`KeyboardInterrupt`, or a run's stop flag). Only the main thread can set handlers;
    elsewhere the start is plain."""
    if threading.current_thread() is not threading.main_thread():
        child.start()
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        child.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        signal.raise_signal(signal.SIGINT)


def _follow(
    child: multiprocessing.process.BaseProcess,
    receiver: Connection,
    limits: HangLimits,
    progress: _Progress,
) -> Timed | _Failure:
    """Read the child's messages until its samples, a failure, or a turn over its limit."""
    label, started, longest = "", time.monotonic(), 0.0
    while True:
        limit = limits.turn_s(longest) if label else limits.start_s
        left = started + limit - time.monotonic()
        if left <= 0:
            what = "its turn did not end" if label else "the child did not start"
            return _Failure(label, f"hung: {what} in {limit:.0f} s")
        if not receiver.poll(min(left, 1.0)):
            continue
        try:
            kind, payload = receiver.recv()
        except EOFError:
            child.join(5)
            return _Failure(label, f"crashed: {_exit_text(child.exitcode)}")
        now = time.monotonic()
        if kind == "turn":
            if label:
                longest = max(longest, now - started)
            label, started = payload, now
            progress.turn(label)
        elif kind == "samples":
            return Timed(*payload)
        else:  # "raised"
            return _Failure(label, f"raised {payload}")


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"killed by signal {-code}"
        # The kernel's out-of-memory killer sends SIGKILL.
        return f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    return f"exit status {code} without a result"


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies (a killed run must not leave a
    probe spinning on its cores)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def _child_main(sender: Connection, job: _Job) -> None:
    _die_with_parent()
    # A Ctrl-C at the terminal reaches the whole process group: the parent ends this child
    # (its interruption kills it), so the child itself has nothing to say about it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(job.threads)
    device = torch.device(job.device)
    if device.type == "cpu":
        set_host_memory_retention(job.host_memory)
    if device.type == "cuda" and device.index is not None:  # "cuda" alone: the current one
        torch.cuda.set_device(device)
    set_device_options(device)
    message: tuple[str, Any]
    try:
        timed = probe(
            job.build,
            job.to_time,
            device=device,
            shape=job.shape,
            settings=job.settings,
            ranks=job.ranks,
            on_turn=lambda label: sender.send(("turn", label)),
        )
        message = ("samples", (timed.samples, timed.dropped, timed.wrong))
    except Exception as err:  # reported to the parent, which names the candidate
        message = ("raised", f"{type(err).__name__}: {err}")
    sender.send(message)
    sender.close()
