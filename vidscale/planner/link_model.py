"""The step of P processes, one per node, joined by a link of known rate, predicted from one
process's measured step (TSM paper §3c, Eq. 1: communication = latency + model size /
bandwidth; AAVG paper §3: communication every K steps).

Inputs are measured on one process, never on the world it predicts: the step's compute
(`one_process_s`, from `bench scaling --nproc 1`), the link's rate each way (`link_bytes_per_s`,
the rate `tc` enforces, or a TCP stream's throughput on an unshaped link) and the model (its
layers' parameters and MACs, `models.costs`). For each variant:

- `ddp` (+ `bf16`): gradients in DDP's buckets (`overlap.ddp_buckets`, ready as backward
  proceeds in proportion to the layers' MACs), each bucket a ring all-reduce of
  `2(P-1)/P x bytes / rate` plus `message_s`, run one after another; the step is the compute
  plus what is left of the all-reduces after the backward pass, plus the per-step small
  collectives (the loop's agreement, DDP's buffer broadcast: `per_step_messages`). The bf16
  hook halves the bytes.
- `ddp+powersgd`: the same schedule with each bucket's compressed size (rank-r factors P and Q
  of every matrix-shaped gradient, the rest sent whole: torch's PowerSGD hook), two all-reduces
  per bucket.
- Every hook's own work per step (`hook_compute_s`, measured on one process) adds to the step.
- `aavg k=K`: no communication for K - 1 steps, then one blocking all-reduce of the parameters,
  the optimizer's state and BatchNorm's statistics (`averaging.average_replicas`): the step is
  the compute plus that all-reduce over K, plus the per-step agreement.

On a node whose one core both computes and communicates, the part of the all-reduce that
hides behind backward is not free: gloo copies and reduces every byte on that core
(`cpu_s_per_byte`, measured where the link does not limit: on an unshaped veth the all-reduce
is bound by that core), so the hidden share of the bytes adds its CPU time to the step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vidscale.models.costs import ModelCosts
from vidscale.planner.overlap import MIB, ddp_buckets, gradient_arrivals

# Seconds of one small collective over gloo/TCP between two namespaces (a round trip of the
# ring's two steps plus gloo's own work), used where no measurement is given.
DEFAULT_MESSAGE_S = 2e-4
BACKWARD_FRACTION = 2.0 / 3.0  # backward costs two forwards of MACs (scaling_model)


@dataclass(frozen=True)
class LinkVariant:
    """How the processes communicate: `strategy` "ddp" with `hook` none/bf16/powersgd (rank
    `powersgd_rank`), or "aavg" averaging every `k` steps."""

    strategy: str
    hook: str = "none"
    k: int = 0
    powersgd_rank: int = 1


@dataclass(frozen=True)
class LinkPrediction:
    """A predicted step: `compute_s` (the one-process step) + `comm_s` (exposed) = `step_s`;
    `bytes_per_step` each process sends into collectives per step (averaged over K for AAVG)."""

    compute_s: float
    comm_s: float
    bytes_per_step: float

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s


def ring_seconds(nbytes: float, *, procs: int, link_bytes_per_s: float, message_s: float) -> float:
    """One ring all-reduce of `nbytes` over `procs` nodes: each sends 2(P-1)/P x nbytes."""
    if procs < 2:
        return 0.0
    transfer = 0.0 if math.isinf(link_bytes_per_s) else 2 * (procs - 1) / procs * nbytes
    return message_s + (transfer / link_bytes_per_s if transfer else 0.0)


def powersgd_bytes(
    shapes: Sequence[tuple[int, ...]], *, rank: int, bytes_per_elem: int = 4
) -> float:
    """Bytes torch's PowerSGD hook all-reduces for gradients of `shapes`: a matrix-shaped
    gradient (n, m) (a conv's flattened to (out, rest)) as its factors P (n x r) and Q (m x r)
    with r = min(rank, n, m); a vector whole."""
    total = 0.0
    for shape in shapes:
        if len(shape) <= 1:
            total += math.prod(shape) * bytes_per_elem
            continue
        n, m = shape[0], math.prod(shape[1:])
        r = min(rank, n, m)
        total += (n + m) * r * bytes_per_elem
    return total


def _ddp_schedule(
    costs: ModelCosts,
    variant: LinkVariant,
    ring: Callable[[float], float],
    *,
    backward_s: float,
    bucket_mb: float,
    param_shapes: Sequence[tuple[int, ...]],
) -> tuple[float, float, float]:
    """DDP's buckets run one after another as backward fills them: (the seconds left after
    backward, the share of the all-reduces' time hidden behind it, the bytes sent)."""
    wire = 2.0 if variant.hook in ("bf16", "fp16") else 4.0
    arrivals = gradient_arrivals(costs, backward_s=backward_s, bytes_per_param=wire)
    buckets = ddp_buckets(arrivals, cap_bytes=bucket_mb * MIB, first_cap_bytes=bucket_mb * MIB)
    cost = ring
    sent = sum(nbytes for _, nbytes in buckets)
    if variant.hook == "powersgd":
        ratio = powersgd_bytes(param_shapes, rank=variant.powersgd_rank) / (
            sum(math.prod(s) for s in param_shapes) * 4
        )
        sent *= ratio

        def cost(nbytes: float) -> float:  # P and Q: two all-reduces of the compressed bucket
            return 2 * ring(nbytes * ratio / 2)

    end = total = 0.0
    for ready, nbytes in buckets:
        end = max(end, ready) + cost(nbytes)
        total += cost(nbytes)
    exposed = max(0.0, end - backward_s)
    hidden = max(0.0, (total - exposed) / total) if total > 0 else 0.0
    return exposed, hidden, sent


def predict_step(
    costs: ModelCosts,
    variant: LinkVariant,
    *,
    one_process_s: float,
    procs: int,
    link_bytes_per_s: float,
    bucket_mb: float,
    averaged_bytes: float,
    param_shapes: Sequence[tuple[int, ...]],
    per_step_bytes: float = 0.0,
    per_step_messages: int = 1,
    message_s: float = DEFAULT_MESSAGE_S,
    hook_compute_s: float = 0.0,
    cpu_s_per_byte: float = 0.0,
    ring: Callable[[float], float] | None = None,
) -> LinkPrediction:
    """The step of `variant` on `procs` single-process nodes (see the module docstring).

    `averaged_bytes`: what one AAVG averaging all-reduces; `param_shapes`: the gradients'
    shapes (PowerSGD's compression); `per_step_bytes`/`per_step_messages`: the small
    collectives every step runs whatever the strategy (DDP's buffer broadcast, the loop's
    agreement); `hook_compute_s`: the hook's own work per step on one process;
    `cpu_s_per_byte`: the core time the collective library spends per byte all-reduced (0: a
    device that communicates without the cores that compute, as a GPU's does); `ring`: the
    seconds of one all-reduce of a given size (default: `ring_seconds` over `procs` nodes;
    `cluster_model.gloo_ring_seconds` for gloo's own ring at any N).
    """

    def default_ring(nbytes: float) -> float:
        return ring_seconds(
            nbytes, procs=procs, link_bytes_per_s=link_bytes_per_s, message_s=message_s
        )

    ring = ring or default_ring

    fixed = per_step_messages * message_s + (
        ring(per_step_bytes) - message_s if per_step_bytes else 0.0
    )
    if variant.strategy == "aavg":
        k = max(1, variant.k)
        comm = fixed + ring(averaged_bytes) / k
        return LinkPrediction(one_process_s, comm, averaged_bytes / k + per_step_bytes)
    backward_s = one_process_s * BACKWARD_FRACTION
    exposed, hidden, sent = _ddp_schedule(
        costs, variant, ring, backward_s=backward_s, bucket_mb=bucket_mb, param_shapes=param_shapes
    )
    # What hides behind backward still takes the core's time where the same core computes.
    shared_core = hidden * sent * cpu_s_per_byte
    comm = exposed + fixed + hook_compute_s + shared_core
    return LinkPrediction(one_process_s, comm, sent + per_step_bytes)
