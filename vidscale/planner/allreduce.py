"""The cost of one ring all-reduce over nodes x GPUs per node (TSM paper §3c, Eq. 1).

The paper models communication as `latency + model size / bandwidth` (§3c, Eq. 1) and trains
with Horovod's ring all-reduce over NCCL (§4.1). For a ring of P GPUs an all-reduce of S bytes is
a reduce-scatter and an all-gather: 2(P - 1) steps, in each of which every GPU sends one chunk of
S / P bytes to its neighbour. Hence

    time = latency(P, N) + 2(P - 1) / P * S / B_ring

How the ring uses a hierarchical machine (N nodes of G GPUs): NCCL orders the ring node by node,
so it crosses between nodes N times and stays inside a node for the other P - N hops. Every GPU
sends the same 2(P - 1) / P * S bytes; a node's share of the inter-node traffic leaves it through
its network adapters, whichever GPU is at the node's edge, and NCCL spreads its rings (channels)
over all of the node's adapters. So with N > 1 the bandwidth term runs at the smaller of the
per-node injection bandwidth (all adapters of a node, shared by its G GPUs) and the intra-node
link of one GPU; on one node only the intra-node link counts. The inter-node hop dominates on
every preset: on Summit 32 GB/s inside a node (its narrowest hop, the X-Bus between the sockets)
against 24.4 GB/s achieved by the node's two EDR adapters.

Latency follows NCCL's own cost model for a ring all-reduce (`src/graph/tuning.cc`, NCCL 2.7,
protocol Simple, the one NCCL uses for large fused buffers): a base latency of 8.4 us, plus one
hop latency per step, 3.4 us for an NVLink hop (5.7 us over PCIe) and 9.6 us for a network hop,
of which there are 2(N - 1) among the 2(P - 1) steps. NCCL multiplies the latency of a
multi-node ring by 1.9 ("plateau effect of ring") for messages of at least P / 16 x 64 KiB,
which every fused gradient buffer here is; we do the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

US = 1e-6
GB = 1e9  # bandwidths are in bytes per second; presets quote GB/s = 1e9 B/s (vendors' unit)

# NCCL 2.7 src/graph/tuning.cc, ring, protocol Simple (microseconds).
NCCL_RING_BASE_US = 8.4
NCCL_HOP_US = {"nvlink": 3.4, "pci": 5.7, "net": 9.6}
NCCL_RING_PLATEAU = 1.9


@dataclass(frozen=True)
class Interconnect:
    """The links a ring all-reduce runs over.

    `intra_bandwidth`: bytes/s one GPU can send to its ring neighbour inside a node (NVLink,
    PCIe). `inter_bandwidth`: bytes/s one node can inject into the network, all its adapters
    together, as achieved (line rate x `efficiency` of the preset). Latencies are per ring step
    (seconds); `base_latency` is paid once per all-reduce; `plateau` multiplies the latency of
    a multi-node ring for large messages (NCCL's model). Infinite bandwidths and zero latencies
    are allowed (the compute-bound limit).
    """

    intra_bandwidth: float
    inter_bandwidth: float
    intra_hop_latency: float = NCCL_HOP_US["nvlink"] * US
    inter_hop_latency: float = NCCL_HOP_US["net"] * US
    base_latency: float = NCCL_RING_BASE_US * US
    plateau: float = NCCL_RING_PLATEAU

    def __post_init__(self) -> None:
        for name in ("intra_bandwidth", "inter_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("intra_hop_latency", "inter_hop_latency", "base_latency"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.plateau >= 1:
            raise ValueError(f"plateau must be >= 1, got {self.plateau}")


def ring_bandwidth(net: Interconnect, *, nodes: int) -> float:
    """Bytes/s the ring's slowest hop carries: the intra-node link on one node, else the smaller
    of the node's injection bandwidth and one GPU's intra-node link."""
    if nodes == 1:
        return net.intra_bandwidth
    return min(net.inter_bandwidth, net.intra_bandwidth)


def ring_latency(net: Interconnect, *, nodes: int, gpus_per_node: int, nbytes: float) -> float:
    """Seconds of latency of one ring all-reduce: base + 2(N-1) network hops + the other
    2(P-1) - 2(N-1) intra-node hops, x the plateau factor for large multi-node messages."""
    ranks = nodes * gpus_per_node
    if ranks == 1:
        return 0.0
    steps = 2 * (ranks - 1)
    inter_steps = 2 * (nodes - 1)
    latency = (
        net.base_latency
        + (steps - inter_steps) * net.intra_hop_latency
        + inter_steps * net.inter_hop_latency
    )
    if nodes > 1 and nbytes >= ranks / 16 * 65536:
        latency *= net.plateau
    return latency


def ring_allreduce_seconds(
    nbytes: float, *, nodes: int, gpus_per_node: int, net: Interconnect
) -> float:
    """Seconds for one ring all-reduce of `nbytes` over `nodes` x `gpus_per_node` GPUs.

    0 on one GPU (nothing to reduce). Otherwise latency + 2(P - 1) / P * nbytes / B_ring.
    """
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"need nodes, gpus_per_node >= 1, got {nodes}, {gpus_per_node}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    ranks = nodes * gpus_per_node
    if ranks == 1 or nbytes == 0:
        return 0.0
    bandwidth = ring_bandwidth(net, nodes=nodes)
    transfer = 0.0 if math.isinf(bandwidth) else 2 * (ranks - 1) / ranks * nbytes / bandwidth
    return ring_latency(net, nodes=nodes, gpus_per_node=gpus_per_node, nbytes=nbytes) + transfer
