"""Timing a rank's gradient all-reduces: clock marks on the host or the device's stream, the
seconds at least one all-reduce was in flight, the part the step waited for, and the bytes sent
(`TrafficMeter`, which every communication hook reports through)."""

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from vidscale.distributed.traffic import Traffic

Mark = float | torch.cuda.Event


def mark(device: torch.device) -> Mark:
    """Now, as seen by the work queued on `device`.

    On CUDA a collective's future completes when the collective is queued, not when it ends
    (NCCL marks it done at launch), so the host clock would time the launch only. A timing
    event recorded in the future's callback runs on a stream that waits for the collective.
    (This CUDA path has not yet run on a GPU: the tests run gloo on the CPU.)
    """
    if device.type != "cuda":
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def seconds_between(ref: Mark, later: Mark) -> float:
    """`later` - `ref` in seconds (negative when `later` came first); waits for CUDA events."""
    if isinstance(ref, float) and isinstance(later, float):
        return later - ref
    assert isinstance(ref, torch.cuda.Event) and isinstance(later, torch.cuda.Event)
    ref.synchronize()
    later.synchronize()
    return float(ref.elapsed_time(later)) / 1000.0


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of the intervals `spans` (overlapping intervals count once)."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@dataclass(frozen=True)
class BucketTimes:
    """One gradient bucket's hook on one clock (seconds): `called` when DDP handed it the
    bucket (its gradients are ready), `returned` when the training thread went on, `completed`
    when its all-reduce ended; `last`: DDP's last bucket of the backward pass."""

    called: float
    returned: float
    completed: float
    last: bool = False


def exposed_seconds(buckets: list[BucketTimes]) -> float:
    """Seconds of one backward pass during which the training thread waited for communication.

    `buckets` are one pass's buckets in launch order. The thread is held by each hook call
    until it returns (casting a bucket down, PowerSGD's factorisation, or on gloo a PowerSGD
    bucket's whole chain); and once the last bucket is handed over, the backward compute is
    done and DDP's backward returns only when every all-reduce has completed: from the last
    bucket's call to the latest completion the step waits for communication alone. A pass whose
    last bucket has not been launched contributes its hook calls only.
    """
    if not buckets:
        return 0.0
    spans = [(b.called, b.returned) for b in buckets]
    if buckets[-1].last:
        spans[-1] = (buckets[-1].called, max(b.completed for b in buckets))
    return union_seconds(spans)


@dataclass(frozen=True)
class _Span:
    """A bucket's marks as recorded: launch number, backward pass (round), hook call and
    return, all-reduce completion, and whether it was the pass's last bucket."""

    number: int
    backward_pass: int
    called: Mark
    returned: Mark
    completed: Mark
    last: bool


class TrafficMeter:
    """What this rank's gradient all-reduces cost since the last `take()`.

    - bytes: what the hooks put into all-reduces (`add_bytes`);
    - seconds: wall-clock time during which at least one bucket's all-reduce was in flight,
      from the hook's call (the bucket's gradients are ready) to the completion of the future
      it returns. DDP overlaps these all-reduces with the rest of the backward pass, so this
      is time spent in communication, not time added to the step by it;
    - exposed seconds: the time added to the step by it (`exposed_seconds`): the hook calls,
      and the wait from the last bucket's call to the end of the pass's last all-reduce;
    - rounds: synchronised steps, i.e. backward passes whose last bucket was all-reduced
      (micro-batches under `no_sync()` run no hook and count nothing).

    Thread-safe: gloo completes futures, and so runs the callbacks that record completions,
    on its own threads, while `take()` runs on the training thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes = 0
        self._launches = 0
        self._passes = 0  # backward passes whose last bucket was launched
        self._spans: list[_Span] = []
        self._rounds = 0

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self._bytes += n

    def timed(
        self, bucket: dist.GradBucket, launch: Callable[[], torch.futures.Future[torch.Tensor]]
    ) -> torch.futures.Future[torch.Tensor]:
        """Run `launch` (which starts `bucket`'s all-reduce) and time it until its future ends.

        Returns a future that completes after the completion is recorded: DDP waits for it
        before the backward pass returns, so a `take()` after the step sees the whole step.
        """
        device = bucket.buffer().device
        last = bucket.is_last()
        with self._lock:
            number, backward_pass = self._launches, self._passes
            self._launches += 1
            self._passes += int(last)
        start = mark(device)
        fut = launch()
        returned = mark(device)

        def record(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            end = mark(device)
            with self._lock:
                self._spans.append(_Span(number, backward_pass, start, returned, end, last))
                self._rounds += int(last)
            return f.value()  # re-raises the all-reduce's error, if any, to DDP

        return fut.then(record)

    def take(self) -> Traffic:
        """Bytes, seconds (in flight and exposed) and rounds since the last call; call it
        between steps.

        On CUDA the host waits here until the timed all-reduces have ended on the GPU (they
        usually have: the trainer reads the all-reduced gradients' norm on the host first).
        """
        with self._lock:
            n, spans, rounds = self._bytes, self._spans, self._rounds
            self._bytes, self._spans, self._rounds = 0, [], 0
        times = self._times(spans)
        return Traffic(
            bytes_sent=n,
            seconds=union_seconds([(t.called, t.completed) for _, t in times]),
            rounds=rounds,
            exposed_seconds=sum(
                (
                    exposed_seconds([t for r, t in times if r == backward_pass])
                    for backward_pass in sorted({r for r, _ in times})
                ),
                0.0,
            ),
        )

    @staticmethod
    def _times(spans: list[_Span]) -> list[tuple[int, BucketTimes]]:
        """(backward pass, marks in seconds) per bucket, in launch order."""
        if not spans:
            return []
        spans = sorted(spans, key=lambda span: span.number)
        # CUDA events only have differences: measure everything from the first launch.
        ref = spans[0].called
        return [
            (
                s.backward_pass,
                BucketTimes(
                    called=seconds_between(ref, s.called),
                    returned=seconds_between(ref, s.returned),
                    completed=seconds_between(ref, s.completed),
                    last=s.last,
                ),
            )
            for s in spans
        ]
