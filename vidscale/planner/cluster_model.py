"""The step of N single-process nodes on one switch, each link of a given rate, as gloo runs
the all-reduces (docs/design.md "A cluster on one machine"; DESIGN §14; TSM paper §3c, Eq. 1).

gloo's all-reduce, as torch's ProcessGroupGloo calls it for a dense CPU tensor (`gloo::allreduce`
in gloo/allreduce.cc, no algorithm chosen, so its ring): a reduce-scatter then an all-gather
around the ring of P ranks, the buffer of S bytes cut into segments of
min(ceil(S / 2P), 1 MiB) (`kMaxSegmentSize`), their count rounded up to a multiple of P and at
least 2P, with two segments in flight at a time. Each rank sends 2(P - 1)/P x S bytes, and every
segment it receives it copies and adds on its own core. Hence per all-reduce:

- latency: each phase is P - 1 steps of the ring, each waiting on the step before; a small
  all-reduce across two nodes (the link's probe, P = 2) is 2 such steps, so one step costs half
  of it and P nodes pay 2(P - 1) of them;
- the wire: 2(P - 1)/P x S / the link's rate;
- the cores: 2(P - 1)/P x S x `cpu_s_per_byte` (gloo's copies and additions, measured where
  the core, not the link, bounds the all-reduce). Where the P nodes share `cores` cores (this
  machine: 2 cores for up to 16 nodes), each rank's share of the cores is cores / P while all
  ranks all-reduce at once, so that time is stretched by P / cores;
- the segments are pipelined, so the wire and the cores overlap: the slower of the two counts.

The rest is `link_model.predict_step` with this ring: DDP's buckets as backward fills them, the
hidden share of each all-reduce costing the computing core its CPU time, each gradient hook's
own compute (stretched like gloo's by P / cores: it is CPU work every rank does at the same
time), AAVG's averaging every k steps, and the per-step small collectives.

A straggler: a node whose compute is `slow_factor` times as long holds every step of DDP and
of AAVG alike (both end each step with the loop's agreement, an all-reduce every rank joins);
a node whose link is slower bounds the ring's wire term (every segment crosses every link).

Two racks joined by a trunk: the ring sends from each rank to the one before it (gloo's
`sendRank` is rank - 1), so every hop between a rank on one rack and the next on the other
crosses the trunk, one way or the other. A full-duplex trunk carrying h hops one way gives
each of them 1/h of its rate, and the slowest hop bounds the ring as a straggler's link does
(`trunk_hops`). Ranks on consecutive nodes cross it once each way, whatever the racks'
oversubscription (nodes per trunk); a rank order that interleaves the racks crosses it more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from vidscale.models.costs import ModelCosts
from vidscale.planner.link_model import LinkPrediction, LinkVariant, predict_step

GLOO_MAX_SEGMENT_BYTES = 1024 * 1024  # gloo/allreduce.h kMaxSegmentSize


@dataclass(frozen=True)
class ClusterLink:
    """What the planner knows of the cluster: `procs` nodes of one process, each link
    `link_bytes_per_s` each way (`slowest_bytes_per_s` for a straggler's link, else the same),
    `pair_latency_s` (a small all-reduce across two nodes: the link's probe),
    `cpu_s_per_byte` (gloo's core time per byte, one node's core alone) and `cores` (how many
    cores the nodes share; 0: one each)."""

    procs: int
    link_bytes_per_s: float
    pair_latency_s: float
    cpu_s_per_byte: float
    cores: int = 0
    slowest_bytes_per_s: float | None = None

    @property
    def contention(self) -> float:
        """How much longer each rank's CPU work takes while every rank does it at once."""
        return max(1.0, self.procs / self.cores) if self.cores else 1.0


def trunk_hops(racks_by_rank: Sequence[int]) -> int:
    """How many hops of gloo's ring cross the trunk in its busier direction, the rack of each
    rank given in rank order (0 when every rank is on one rack)."""
    ways: dict[tuple[int, int], int] = {}
    for rank, rack in enumerate(racks_by_rank):
        towards = racks_by_rank[rank - 1]  # rank 0 sends to the last rank
        if towards != rack:
            ways[rack, towards] = ways.get((rack, towards), 0) + 1
    return max(ways.values(), default=0)


def gloo_segments(nbytes: float, procs: int) -> int:
    """How many segments gloo's ring cuts `nbytes` into across `procs` ranks."""
    segment = min(math.ceil(nbytes / (2 * procs)), GLOO_MAX_SEGMENT_BYTES)
    count = max(math.ceil(nbytes / max(segment, 1)), 2 * procs)
    return math.ceil(count / procs) * procs


def gloo_ring_seconds(nbytes: float, link: ClusterLink) -> float:
    """One gloo ring all-reduce of `nbytes` across the cluster (see the module docstring)."""
    p = link.procs
    if p < 2 or nbytes <= 0:
        return 0.0
    sent = 2 * (p - 1) / p * nbytes
    rate = min(link.link_bytes_per_s, link.slowest_bytes_per_s or math.inf)
    wire = 0.0 if math.isinf(rate) else sent / rate
    cores = sent * link.cpu_s_per_byte * link.contention
    return (p - 1) * link.pair_latency_s + max(wire, cores)


def predict_cluster_step(
    costs: ModelCosts,
    variant: LinkVariant,
    link: ClusterLink,
    *,
    one_process_s: float,
    bucket_mb: float,
    averaged_bytes: float,
    param_shapes: Sequence[tuple[int, ...]],
    per_step_bytes: float = 0.0,
    per_step_messages: int = 1,
    hook_compute_s: float = 0.0,
    slow_factor: float = 1.0,
) -> LinkPrediction:
    """The step of `variant` on the cluster `link` describes, from one process's step
    `one_process_s` (the slowest node's: times `slow_factor`), the model's per-layer costs and
    the link's probe; the other arguments as `link_model.predict_step`'s."""
    per_message = (link.procs - 1) * link.pair_latency_s
    return predict_step(
        costs,
        variant,
        one_process_s=one_process_s * slow_factor,
        procs=link.procs,
        link_bytes_per_s=link.link_bytes_per_s,
        bucket_mb=bucket_mb,
        averaged_bytes=averaged_bytes,
        param_shapes=param_shapes,
        per_step_bytes=per_step_bytes,
        per_step_messages=per_step_messages,
        message_s=per_message,
        hook_compute_s=hook_compute_s * link.contention,
        # Each byte of a bucket is sent 2(P - 1)/P times over, and each received copy added.
        cpu_s_per_byte=link.cpu_s_per_byte * 2 * (link.procs - 1) / link.procs,
        ring=lambda nbytes: gloo_ring_seconds(nbytes, link),
    )
