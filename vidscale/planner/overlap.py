"""How much of the gradient all-reduce hides under the backward pass (TSM paper §3c, Fig. 3c).

Mechanism, with no fitted factor: backward visits the layers in reverse forward order and
spends on each a share of the backward time equal to its share of the MACs
(`models.costs.model_costs`); a layer's gradients are ready when its backward ends. Ready
gradients are packed into buckets, each bucket's all-reduce starts when the bucket is ready and
the network is free, and the network runs the all-reduces one after another (one NCCL stream).
The exposed communication of a step is the end of the last all-reduce minus the end of the
backward pass (never negative). The two packers:

- DDP (PyTorch `DistributedDataParallel`): static buckets in gradient-ready order (DDP rebuilds
  them in that order after its first iteration), capped at `bucket_cap_mb` = 25 MiB; a bucket
  closes once it reaches its cap. torch caps the first bucket at 1 MiB
  (`torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`) only when `bucket_cap_mb` is left unset;
  vidscale's `wrap_ddp` passes it, so its first bucket is capped like the others
  (`Bucketing.first_bucket_mb` None; 1.0 models torch's default).
- Horovod (the paper's framework, §4.1): Tensor Fusion. Horovod's background thread wakes every
  cycle (`HOROVOD_CYCLE_TIME`, 5 ms by default) and fuses the tensors ready at that moment into
  buffers of at most `HOROVOD_FUSION_THRESHOLD` (64 MiB by default) bytes (Horovod docs,
  "Tensor Fusion"; the defaults until v0.21, which changed them to 1 ms and 128 MiB, i.e. those
  of 2019). We model a fusion as happening at the first cycle tick at which the network is free
  and a tensor is waiting: tensors that become ready while an all-reduce runs are fused into the
  next one rather than each tick issuing its own small all-reduce. The cycle clock is not tied to
  the step, so exposure is averaged over evenly spaced tick phases.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from vidscale.models.costs import ModelCosts

MIB = 1024 * 1024
DDP_FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET_CAP_MB = 25.0  # DistributedDataParallel(bucket_cap_mb=25)
HOROVOD_FUSION_MB = 64.0  # HOROVOD_FUSION_THRESHOLD default before v0.21
HOROVOD_CYCLE_S = 5e-3  # HOROVOD_CYCLE_TIME default before v0.21 (5 ms)

Framework = Literal["ddp", "horovod"]
Cost = Callable[[float], float]


@dataclass(frozen=True)
class Gradient:
    """One layer's gradients: `ready` seconds after the backward pass starts, `nbytes` bytes."""

    ready: float
    nbytes: float


@dataclass(frozen=True)
class Bucketing:
    """How gradients become all-reduces: DDP buckets or Horovod fusion (`bucket_mb` is DDP's
    cap or Horovod's fusion threshold, in MiB; `cycle_s` is Horovod's cycle time)."""

    framework: Framework = "ddp"
    bucket_mb: float = DDP_BUCKET_CAP_MB
    cycle_s: float = HOROVOD_CYCLE_S
    phases: int = 16
    # Horovod only: fuse at the first tick at which the network is free (the model), or issue
    # each tick's tensors at that tick even while earlier all-reduces still run (a sensitivity).
    fuse_when_free: bool = True
    # DDP only: the first bucket's cap in MiB (None: `bucket_mb`, as `wrap_ddp` runs it).
    first_bucket_mb: float | None = None

    def __post_init__(self) -> None:
        if self.framework not in ("ddp", "horovod"):
            raise ValueError(f"framework must be ddp or horovod, got {self.framework!r}")
        if not self.bucket_mb > 0:
            raise ValueError(f"bucket size must be > 0 MiB, got {self.bucket_mb}")
        if not self.cycle_s >= 0 or self.phases < 1:
            raise ValueError(f"need cycle_s >= 0 and phases >= 1: {self}")


def horovod(*, fusion_mb: float = HOROVOD_FUSION_MB, cycle_s: float = HOROVOD_CYCLE_S) -> Bucketing:
    return Bucketing(framework="horovod", bucket_mb=fusion_mb, cycle_s=cycle_s)


def gradient_arrivals(
    costs: ModelCosts, *, backward_s: float, bytes_per_param: float
) -> tuple[Gradient, ...]:
    """The gradients of `costs`'s layers in the order backward produces them (reverse forward
    order), each ready when the backward work up to and including its layer is done."""
    total = costs.macs
    done = 0
    out: list[Gradient] = []
    for layer in reversed(costs.layers):
        done += layer.macs
        if layer.params:
            share = done / total if total else 1.0
            out.append(Gradient(ready=backward_s * share, nbytes=layer.params * bytes_per_param))
    return tuple(out)


def _run(buckets: Sequence[tuple[float, float]], cost: Cost, *, free: float = 0.0) -> float:
    """The network's FIFO: each (ready, nbytes) all-reduce starts when it is ready and the
    previous one has ended; returns when the last ends."""
    for ready, nbytes in buckets:
        free = max(free, ready) + cost(nbytes)
    return free


def ddp_buckets(
    arrivals: Sequence[Gradient],
    *,
    cap_bytes: float,
    first_cap_bytes: float = DDP_FIRST_BUCKET_BYTES,
) -> list[tuple[float, float]]:
    """DDP's buckets as (ready time, bytes): filled in ready order, closed at their cap."""
    buckets: list[tuple[float, float]] = []
    size, ready, cap = 0.0, 0.0, min(first_cap_bytes, cap_bytes)
    for grad in arrivals:
        size, ready = size + grad.nbytes, grad.ready
        if size >= cap:
            buckets.append((ready, size))
            size, cap = 0.0, cap_bytes
    if size:
        buckets.append((ready, size))
    return buckets


def _fuse(sizes: Sequence[float], threshold: float) -> list[float]:
    """Horovod's fusion of one cycle's tensors: consecutive buffers of at most `threshold`
    bytes (a larger tensor goes alone)."""
    buffers: list[float] = []
    for size in sizes:
        if buffers and buffers[-1] + size <= threshold:
            buffers[-1] += size
        else:
            buffers.append(size)
    return buffers


def horovod_end(
    arrivals: Sequence[Gradient],
    cost: Cost,
    *,
    threshold: float,
    cycle_s: float,
    phase: float,
    fuse_when_free: bool = True,
) -> float:
    """When the last fused all-reduce ends, with cycle ticks at (phase + k) * cycle_s."""
    free, i, n = 0.0, 0, len(arrivals)
    while i < n:
        wake = max(free, arrivals[i].ready) if fuse_when_free else arrivals[i].ready
        if cycle_s > 0:  # the first tick at or after `wake`
            wake = (math.ceil(wake / cycle_s - phase - 1e-12) + phase) * cycle_s
        j = i
        while j < n and arrivals[j].ready <= wake:
            j += 1
        sizes = [g.nbytes for g in arrivals[i:j]]
        free = max(free, wake)
        for buffer in _fuse(sizes, threshold):
            free += cost(buffer)
        i = j
    return free


def comm_end(arrivals: Sequence[Gradient], cost: Cost, bucketing: Bucketing) -> float:
    """Seconds after the backward pass starts at which the step's last all-reduce ends."""
    if not arrivals:
        return 0.0
    threshold = bucketing.bucket_mb * MIB
    if bucketing.framework == "ddp":
        first = bucketing.first_bucket_mb or bucketing.bucket_mb
        return _run(ddp_buckets(arrivals, cap_bytes=threshold, first_cap_bytes=first * MIB), cost)
    phases = [(k + 0.5) / bucketing.phases for k in range(bucketing.phases)]
    ends = [
        horovod_end(
            arrivals,
            cost,
            threshold=threshold,
            cycle_s=bucketing.cycle_s,
            phase=p,
            fuse_when_free=bucketing.fuse_when_free,
        )
        for p in phases
    ]
    return sum(ends) / len(ends)


def exposed_comm(
    costs: ModelCosts,
    cost: Cost,
    bucketing: Bucketing,
    *,
    backward_s: float,
    bytes_per_param: float,
) -> float:
    """Seconds of all-reduce left after the backward pass ends (>= 0)."""
    arrivals = gradient_arrivals(costs, backward_s=backward_s, bytes_per_param=bytes_per_param)
    return max(0.0, comm_end(arrivals, cost, bucketing) - backward_s)
