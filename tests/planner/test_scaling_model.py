"""The scaling model: ring formula by hand, overlap mechanics, limits, and the TSM paper's
Table 3 (every row within 15%), Fig. 3c (ordering and magnitudes) and Fig. 6."""

from __future__ import annotations

import dataclasses
import math
from typing import TypedDict

import pytest

from vidscale.bench.compute.flops import model_info
from vidscale.models.costs import LayerCost, ModelCosts, model_costs
from vidscale.models.registry import ModelConfig
from vidscale.planner import allreduce, overlap, paper_scaling
from vidscale.planner.allreduce import GB, US, Interconnect, ring_allreduce_seconds
from vidscale.planner.clusters import SUMMIT, gpu_compute, reference_compute
from vidscale.planner.overlap import Bucketing, Gradient, horovod
from vidscale.planner.scaling_model import (
    Cluster,
    GpuCompute,
    Workload,
    calibrate_clip_seconds,
    predict,
    step_time,
)


class Latencies(TypedDict):
    intra_hop_latency: float
    inter_hop_latency: float
    base_latency: float


NO_LATENCY = Latencies(intra_hop_latency=0.0, inter_hop_latency=0.0, base_latency=0.0)


def toy_costs(params: int = 10_000_000, layers: int = 10) -> ModelCosts:
    """`layers` equal layers: each 1 GMAC and params / layers parameters."""
    per = LayerCost("layer", params // layers, 10**9)
    return ModelCosts(model="toy", frames=8, size=224, layers=(per,) * layers)


def toy_work(**kw: object) -> Workload:
    base = dict(costs=toy_costs(), batch_per_gpu=8, compute=GpuCompute(clip_s=0.03))
    return Workload(**{**base, **kw})  # type: ignore[arg-type]


def cluster(nodes: int, gpus: int = 4, *, inter: float = 10 * GB, **net: float) -> Cluster:
    return Cluster(
        nodes=nodes,
        gpus_per_node=gpus,
        net=Interconnect(intra_bandwidth=50 * GB, inter_bandwidth=inter, **net),
        bucketing=Bucketing(),
    )


# -- the ring all-reduce ------------------------------------------------------------------------


def test_ring_formula_matches_hand_computed_values() -> None:
    net = Interconnect(intra_bandwidth=10 * GB, inter_bandwidth=2 * GB, **NO_LATENCY)
    one = dict(net=net)
    assert ring_allreduce_seconds(1e9, nodes=1, gpus_per_node=1, **one) == 0.0
    # one node of 4: 2 * 3/4 * 1 GB / 10 GB/s = 0.15 s
    assert ring_allreduce_seconds(1e9, nodes=1, gpus_per_node=4, **one) == pytest.approx(0.15)
    # 2 nodes x 4: 2 * 7/8 * 1 GB over the 2 GB/s per-node injection = 0.875 s
    assert ring_allreduce_seconds(1e9, nodes=2, gpus_per_node=4, **one) == pytest.approx(0.875)


def test_ring_latency_counts_intra_and_inter_hops() -> None:
    net = Interconnect(
        intra_bandwidth=math.inf,
        inter_bandwidth=math.inf,
        intra_hop_latency=1 * US,
        inter_hop_latency=10 * US,
        base_latency=5 * US,
        plateau=2.0,
    )
    # 3 nodes x 4 = 12 ranks: 22 steps, 4 of them between nodes -> 5 + 18 * 1 + 4 * 10 = 63 us
    small = ring_allreduce_seconds(1000, nodes=3, gpus_per_node=4, net=net)
    assert small == pytest.approx(63 * US)
    # a message of >= P/16 x 64 KiB pays NCCL's plateau factor on more than one node
    assert ring_allreduce_seconds(10**8, nodes=3, gpus_per_node=4, net=net) == pytest.approx(
        126 * US
    )
    # one node: 2 * 3 intra hops + base, no plateau
    assert ring_allreduce_seconds(10**8, nodes=1, gpus_per_node=4, net=net) == pytest.approx(
        11 * US
    )


def test_ring_bandwidth_is_the_slowest_hop() -> None:
    net = Interconnect(intra_bandwidth=50 * GB, inter_bandwidth=25 * GB)
    assert allreduce.ring_bandwidth(net, nodes=1) == 50 * GB
    assert allreduce.ring_bandwidth(net, nodes=2) == 25 * GB
    with pytest.raises(ValueError, match="inter_bandwidth"):
        Interconnect(intra_bandwidth=1.0, inter_bandwidth=-1.0)


# -- gradients, buckets, overlap ----------------------------------------------------------------


def test_gradients_arrive_in_reverse_layer_order_by_backward_work() -> None:
    costs = ModelCosts(
        "m", 8, 224, (LayerCost("a", 10, 1), LayerCost("bn", 2, 0), LayerCost("b", 100, 3))
    )
    arrivals = overlap.gradient_arrivals(costs, backward_s=1.0, bytes_per_param=4)
    # backward: b (3/4 of the work), then bn (no work), then a
    assert [g.nbytes for g in arrivals] == [400, 8, 40]
    assert [g.ready for g in arrivals] == pytest.approx([0.75, 0.75, 1.0])


def test_ddp_buckets_cap_the_first_at_one_mib_and_keep_every_byte() -> None:
    arrivals = [Gradient(ready=i / 100, nbytes=3 * overlap.MIB) for i in range(1, 101)]
    buckets = overlap.ddp_buckets(arrivals, cap_bytes=25 * overlap.MIB)
    assert buckets[0][1] == 3 * overlap.MIB  # the 1 MiB first bucket closes at its first tensor
    assert all(size >= 25 * overlap.MIB for _, size in buckets[1:-1])
    assert sum(size for _, size in buckets) == 300 * overlap.MIB
    assert [ready for ready, _ in buckets] == sorted(ready for ready, _ in buckets)


def test_ddp_first_bucket_follows_the_cap_unless_set() -> None:
    arrivals = [Gradient(ready=i / 10, nbytes=0.6 * overlap.MIB) for i in range(1, 11)]
    calls: list[float] = []

    def cost(nbytes: float) -> float:
        calls.append(nbytes)
        return 0.0

    overlap.comm_end(arrivals, cost, Bucketing(bucket_mb=100.0))
    assert calls == [pytest.approx(6 * overlap.MIB)]  # as wrap_ddp runs it: one bucket
    calls.clear()
    torch_default = Bucketing(bucket_mb=100.0, first_bucket_mb=1.0)
    overlap.comm_end(arrivals, cost, torch_default)
    assert calls == [pytest.approx(1.2 * overlap.MIB), pytest.approx(4.8 * overlap.MIB)]


def test_horovod_fusion_respects_the_threshold() -> None:
    assert overlap._fuse([10, 20, 40, 100, 5], 64) == [30, 40, 100, 5]


def test_all_reduce_under_the_backward_pass_exposes_only_the_tail() -> None:
    arrivals = [Gradient(ready=i / 10, nbytes=1.0) for i in range(1, 11)]
    ddp = Bucketing(bucket_mb=1e-9)  # one bucket per gradient
    assert overlap.comm_end(arrivals, lambda nbytes: 0.01, ddp) == pytest.approx(1.01)
    # the network slower than the backward pass: all ten back to back from the first ready
    assert overlap.comm_end(arrivals, lambda nbytes: 0.5, ddp) == pytest.approx(0.1 + 10 * 0.5)


def test_fusion_when_the_network_frees_batches_what_arrived_meanwhile() -> None:
    arrivals = [Gradient(ready=i / 100, nbytes=1.0) for i in range(1, 101)]
    calls: list[float] = []

    def cost(nbytes: float) -> float:
        calls.append(nbytes)
        return 0.2

    overlap.horovod_end(arrivals, cost, threshold=1e9, cycle_s=0.0, phase=0.0)
    assert sum(calls) == 100 and len(calls) == 6  # 1, then what came in each 0.2 s
    calls.clear()
    overlap.horovod_end(
        arrivals, cost, threshold=1e9, cycle_s=0.01, phase=0.0, fuse_when_free=False
    )
    assert len(calls) == 100  # a call per 10 ms tick


# -- the step: limits and monotonicity ----------------------------------------------------------


def test_one_gpu_has_no_communication_even_with_horovod() -> None:
    one = dataclasses.replace(cluster(1, 1), bucketing=horovod())
    step = step_time(toy_work(), one)
    assert step.comm_s == 0.0 and step.total_s == step.compute_s


def test_infinite_bandwidth_without_latency_is_compute_bound() -> None:
    for bucketing in (Bucketing(), dataclasses.replace(horovod(), cycle_s=0.0)):
        fast = dataclasses.replace(
            cluster(64, inter=math.inf, **NO_LATENCY),
            net=Interconnect(intra_bandwidth=math.inf, inter_bandwidth=math.inf, **NO_LATENCY),
            bucketing=bucketing,
        )
        pred = predict(toy_work(), fast, epochs=1, clips=1000)
        assert pred.step.comm_s == 0.0
        assert pred.efficiency == pytest.approx(1.0)
        assert pred.bottleneck == "compute"


def test_exposed_comm_falls_with_bandwidth_and_grows_with_nodes() -> None:
    work = toy_work(costs=toy_costs(params=200_000_000))
    by_bandwidth = [step_time(work, cluster(8, inter=b * GB)).comm_s for b in (1, 2, 5, 25, 100)]
    assert by_bandwidth == sorted(by_bandwidth, reverse=True)
    by_nodes = [step_time(work, cluster(n, inter=2 * GB)).comm_s for n in (2, 4, 16, 64, 256)]
    assert by_nodes == sorted(by_nodes)
    effs = [predict(work, cluster(n, inter=2 * GB), epochs=1, clips=1).efficiency for n in (2, 16)]
    assert 1.0 >= effs[0] >= effs[1]


def test_data_loading_hides_under_the_step_until_it_is_longer() -> None:
    hidden = step_time(toy_work(data_clip_s=0.01), cluster(1))
    assert hidden.data_s == 0.0 and hidden.bottleneck == "compute"
    slow = step_time(toy_work(data_clip_s=0.1), cluster(1))
    assert slow.total_s == pytest.approx(0.8) and slow.bottleneck == "data"


def test_compressed_gradients_halve_the_bytes() -> None:
    work = toy_work(costs=toy_costs(params=200_000_000))
    bf16 = dataclasses.replace(work, grad_bytes=2)
    assert bf16.model_bytes == work.model_bytes / 2
    slow = cluster(8, inter=1 * GB)
    assert step_time(bf16, slow).comm_s < step_time(work, slow).comm_s


def test_calibration_reproduces_the_measured_step() -> None:
    work, hier = toy_work(), cluster(2, inter=1 * GB)
    compute = calibrate_clip_seconds(0.5, work, hier, fixed_clips=1.0)
    assert compute.fixed_s == pytest.approx(compute.clip_s)
    calibrated = dataclasses.replace(work, compute=compute)
    assert step_time(calibrated, hier).total_s == pytest.approx(0.5, rel=1e-9)


# -- the per-layer table ------------------------------------------------------------------------


def test_layer_table_adds_up_to_the_model() -> None:
    costs = model_costs("tsm_resnet50")
    info = model_info(ModelConfig(name="tsm_resnet50", num_classes=400), frames=8, size=224)
    assert costs.params == info.params == 24_327_632
    assert costs.macs == info.macs
    assert model_costs("i3d_resnet50_3x3x3").params / costs.params == pytest.approx(1.93, abs=0.01)


# -- the paper ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def table3() -> list[paper_scaling.Table3Row]:
    return paper_scaling.table3()


def test_the_baseline_is_the_calibration_input() -> None:
    base = paper_scaling.baseline()
    assert base.train_s == pytest.approx(49 * 3600 + 55 * 60, rel=1e-6)
    assert reference_compute(SUMMIT).fixed_s > 0  # V100 batch efficiency, from NVIDIA's data


@pytest.mark.parametrize("index", range(len(paper_scaling.TABLE3_TIMES)))
def test_table3_row_within_15_percent(table3: list[paper_scaling.Table3Row], index: int) -> None:
    row = table3[index]
    assert row.gpus == paper_scaling.TABLE3_TIMES[index][0]
    assert abs(row.error) <= 0.15, f"{row.gpus} GPUs: {100 * row.error:+.1f}%"


def test_table3_communication_grows_with_the_gpu_count(
    table3: list[paper_scaling.Table3Row],
) -> None:
    comm = [row.model.step.comm_s for row in table3]
    assert comm == sorted(comm) and comm[-1] > 5 * comm[0]
    assert table3[0].paper_step_s == pytest.approx(0.410, abs=0.001)


def test_fig3c_orders_and_sizes_tsm_and_i3d() -> None:
    curves = paper_scaling.fig3c()
    tsm, i3d = curves["tsm_resnet50"], curves["i3d_resnet50_3x3x3"]
    assert tsm[-1].nodes == 8
    assert tsm[-1].efficiency >= 0.98
    assert i3d[-1].efficiency < 0.85
    assert all(t.efficiency > i.efficiency for t, i in zip(tsm[1:], i3d[1:], strict=True))
    # the nonlinearity: at 10x the bandwidth both hide their all-reduce
    fast = paper_scaling.fig3c(nodes=range(8, 9), bandwidth_gbps=85)
    assert fast["i3d_resnet50_3x3x3"][0].efficiency > 0.97


def test_fig6_tsm_scales_past_80_percent_and_outruns_both_i3ds() -> None:
    curves = paper_scaling.fig6(nodes=(1, 256))
    tsm = curves["tsm_resnet50"][-1]
    assert tsm.gpus == 1536 and tsm.efficiency > 0.8
    for other in ("i3d_resnet50_3x3x3", "i3d_resnet50_3x1x1"):
        assert tsm.clips_per_s > curves[other][-1].clips_per_s


def test_models_without_table1_data_scale_by_macs() -> None:
    tsn = gpu_compute("tsn_resnet50", SUMMIT)
    tsm = gpu_compute("tsm_resnet50", SUMMIT)
    assert tsn.clip_s == pytest.approx(tsm.clip_s, rel=0.01)  # the same MACs (the shift has none)
