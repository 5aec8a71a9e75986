"""`planner.cluster_model`: gloo's ring as gloo/allreduce.cc cuts and sends it, and the N-node
step built on it."""

from __future__ import annotations

import math

import pytest

from vidscale.models.costs import model_costs
from vidscale.planner.cluster_model import (
    GLOO_MAX_SEGMENT_BYTES,
    ClusterLink,
    gloo_ring_seconds,
    gloo_segments,
    predict_cluster_step,
    trunk_hops,
)
from vidscale.planner.link_model import LinkVariant, predict_step, ring_seconds

MIB = 1024 * 1024


def test_segments_are_as_gloo_cuts_them() -> None:
    # Small: 2P segments of S / 2P. Large: 1 MiB segments, their count a multiple of P.
    assert gloo_segments(64, 4) == 8
    assert gloo_segments(25 * MIB, 2) == 26
    assert gloo_segments(25 * MIB, 16) == 32  # 25 MiB / 32 < 1 MiB: 2P segments
    assert gloo_segments(100 * MIB, 16) == 112  # 100 one-MiB segments, rounded up to 7 x 16
    assert GLOO_MAX_SEGMENT_BYTES == MIB


def link(procs: int, *, cores: int = 0, cpu: float = 0.0) -> ClusterLink:
    return ClusterLink(
        procs=procs, link_bytes_per_s=62.5e6, pair_latency_s=3e-4, cpu_s_per_byte=cpu, cores=cores
    )


def test_two_nodes_with_a_core_each_are_link_model_s_ring() -> None:
    for nbytes in (40.0, 1e6, 1e8):
        got = gloo_ring_seconds(nbytes, link(2))
        want = ring_seconds(nbytes, procs=2, link_bytes_per_s=62.5e6, message_s=3e-4)
        assert got == pytest.approx(want)


def test_n_nodes_pay_2_p_minus_1_steps_and_2_p_minus_1_over_p_of_the_bytes() -> None:
    small = gloo_ring_seconds(40.0, link(16))
    assert small == pytest.approx(15 * 3e-4, rel=1e-3)  # latency: 2(P-1) steps of half a pair's
    large = gloo_ring_seconds(1e8, link(16)) - 15 * 3e-4
    assert large == pytest.approx(2 * 15 / 16 * 1e8 / 62.5e6)


def test_nodes_sharing_cores_are_bound_by_them_when_the_link_is_fast() -> None:
    fast = ClusterLink(16, link_bytes_per_s=1e12, pair_latency_s=0.0, cpu_s_per_byte=1e-9)
    shared = ClusterLink(16, 1e12, 0.0, cpu_s_per_byte=1e-9, cores=2)
    sent = 2 * 15 / 16 * 1e8
    assert gloo_ring_seconds(1e8, fast) == pytest.approx(sent * 1e-9)
    assert gloo_ring_seconds(1e8, shared) == pytest.approx(sent * 1e-9 * 8)
    assert shared.contention == 8 and link(2, cores=2).contention == 1


def test_a_slow_link_anywhere_bounds_the_ring_and_a_slow_node_every_step() -> None:
    costs = model_costs("tsm_resnet50", frames=4, size=112, num_classes=400)
    shapes = [(max(1, layer.params),) for layer in costs.layers]
    common = dict(one_process_s=0.5, bucket_mb=25.0, averaged_bytes=2e8, param_shapes=shapes)
    even = predict_cluster_step(costs, LinkVariant("ddp"), link(8), **common)  # type: ignore[arg-type]
    slow_link = ClusterLink(8, 62.5e6, 3e-4, 0.0, slowest_bytes_per_s=62.5e6 / 4)
    narrow = predict_cluster_step(costs, LinkVariant("ddp"), slow_link, **common)  # type: ignore[arg-type]
    assert narrow.comm_s > 3 * even.comm_s
    for variant in (LinkVariant("ddp"), LinkVariant("aavg", k=4)):
        base = predict_cluster_step(costs, variant, link(8), **common)  # type: ignore[arg-type]
        slow = predict_cluster_step(costs, variant, link(8), slow_factor=1.5, **common)  # type: ignore[arg-type]
        assert slow.compute_s == pytest.approx(1.5 * base.compute_s)


def test_at_two_nodes_it_is_the_two_node_planner() -> None:
    costs = model_costs("tsm_resnet50", frames=4, size=112, num_classes=400)
    shapes = [(max(1, layer.params),) for layer in costs.layers]
    for variant in (LinkVariant("ddp"), LinkVariant("ddp", "bf16"), LinkVariant("aavg", k=4)):
        args = dict(
            one_process_s=0.47,
            bucket_mb=25.0,
            averaged_bytes=2e8,
            param_shapes=shapes,
            per_step_bytes=4e5,
            per_step_messages=2,
            hook_compute_s=0.01,
        )
        got = predict_cluster_step(costs, variant, link(2, cpu=1.1e-9), **args)  # type: ignore[arg-type]
        want = predict_step(
            costs,
            variant,
            procs=2,
            link_bytes_per_s=62.5e6,
            message_s=3e-4,
            cpu_s_per_byte=1.1e-9,
            **args,  # type: ignore[arg-type]
        )
        assert math.isclose(got.step_s, want.step_s, rel_tol=1e-9)


def test_the_ring_crosses_a_trunk_once_each_way_when_ranks_follow_the_racks() -> None:
    # Consecutive ranks on two racks: one hop each way, however many nodes share the trunk.
    assert trunk_hops([0, 0, 1, 1]) == 1
    assert trunk_hops([0] * 8 + [1] * 8) == 1
    assert trunk_hops([0, 1]) == 1
    assert trunk_hops([0, 0, 0]) == 0  # one rack: no trunk in the ring
    # Racks interleaved rank by rank: every hop crosses, half of them each way.
    assert trunk_hops([0, 1, 0, 1, 0, 1]) == 3


def test_sixteen_nodes_ranked_by_address_cross_the_trunk_twice_each_way() -> None:
    """torch's c10d rendezvous ranks nodes by their addresses as strings: on 16 nodes .1, .10,
    ..., .16, .2, ..., .9, i.e. nodes 0, 9-15, 1-8; nodes 0-7 on rack 0, 8-15 on rack 1."""
    nodes_by_rank = sorted(range(16), key=lambda node: f"10.0.0.{node + 1}")
    assert nodes_by_rank[:3] == [0, 9, 10]
    assert trunk_hops([int(node >= 8) for node in nodes_by_rank]) == 2
