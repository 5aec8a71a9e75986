"""A model of data-parallel training time on N nodes x G GPUs (TSM paper §3, §4, Table 3).

Pure functions of numbers; nothing here runs a collective. One synchronous SGD step:

    compute  = b * t_clip + t_fixed                     (one GPU, b clips of its batch)
    comm     = end of the last gradient all-reduce - end of the backward pass   (>= 0)
    step     = max(compute + comm, b * t_load)
    data     = step - (compute + comm)                 (loading not hidden by the GPU's work)

`t_fixed` is the part of a step that does not shrink with the per-GPU batch (kernel launches,
the optimizer step, the GPU's lower occupancy on a smaller batch); `t_load` is the data loader's
wall time per clip for one GPU's loader processes, which work in parallel with the GPU for the
whole step, hence the max (when either term is zero this is the brief's "max(compute, loading)
+ exposed all-reduce"). The backward pass is the last `backward_fraction` of the compute (2/3:
a backward pass costs two forward passes of MACs, input and weight gradients); `overlap.py`
turns it into gradient-ready times and `allreduce.py` prices each all-reduce.

Outputs per configuration (`predict`): the step with its split, clips/s, the time to train E
epochs of a dataset, the scaling efficiency of the paper (§3c, §4.2: actual speed over one node's
speed x nodes, at the same per-GPU batch) and the bottleneck. `calibrate_clip_seconds` inverts
the model: the per-clip compute that makes the model reproduce a measured step, which is how the
paper's one-node baseline (Table 3, first row) becomes the input of every other row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Literal

from vidscale.models.costs import ModelCosts
from vidscale.planner.allreduce import Interconnect, ring_allreduce_seconds
from vidscale.planner.overlap import Bucketing, exposed_comm

Bottleneck = Literal["compute", "data", "network"]
BOTTLENECK_SHARE = 0.05  # an exposed term names the bottleneck once it is >= 5% of the step
GRAD_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes per gradient element on the wire


@dataclass(frozen=True)
class GpuCompute:
    """One GPU's compute time for a step of b clips: b * `clip_s` + `fixed_s` seconds."""

    clip_s: float
    fixed_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.clip_s > 0 or not self.fixed_s >= 0:
            raise ValueError(f"need clip_s > 0 and fixed_s >= 0, got {self}")

    def step_s(self, batch: int) -> float:
        return batch * self.clip_s + self.fixed_s


@dataclass(frozen=True)
class Workload:
    """What each GPU does per step: `batch_per_gpu` clips of `costs`'s model at `compute`'s
    speed, `grad_bytes` bytes per gradient element on the wire (4 for fp32, 2 with a bf16/fp16
    compression hook), the loader taking `data_clip_s` seconds per clip."""

    costs: ModelCosts
    batch_per_gpu: int
    compute: GpuCompute
    data_clip_s: float = 0.0
    grad_bytes: float = 4.0
    backward_fraction: float = 2.0 / 3.0

    def __post_init__(self) -> None:
        if self.batch_per_gpu < 1:
            raise ValueError(f"batch_per_gpu must be >= 1, got {self.batch_per_gpu}")
        if not self.data_clip_s >= 0 or not self.grad_bytes > 0:
            raise ValueError(f"need data_clip_s >= 0 and grad_bytes > 0: {self}")
        if not 0 < self.backward_fraction < 1:
            raise ValueError(f"backward_fraction must be in (0, 1), got {self.backward_fraction}")

    @property
    def model_bytes(self) -> float:
        """Bytes of gradients all-reduced per step (the paper's "model size", Eq. 1)."""
        return self.costs.params * self.grad_bytes


@dataclass(frozen=True)
class Cluster:
    """`nodes` x `gpus_per_node` GPUs joined by `net`, gradients packed by `bucketing`."""

    nodes: int
    gpus_per_node: int
    net: Interconnect
    bucketing: Bucketing

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError(
                f"need nodes, gpus_per_node >= 1, got {self.nodes}, {self.gpus_per_node}"
            )

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def with_nodes(self, nodes: int) -> Cluster:
        return dataclasses.replace(self, nodes=nodes)


@dataclass(frozen=True)
class StepTime:
    """Seconds of one step and its split: `total_s = compute_s + comm_s + data_s`.

    `comm_s` and `data_s` are the exposed parts; `allreduce_s` is the paper's Eq. 1 for the
    whole model (latency + all gradient bytes / bandwidth), how long the communication would take
    if none of it were hidden, for scale.
    """

    compute_s: float
    comm_s: float
    data_s: float
    allreduce_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s + self.data_s

    @property
    def bottleneck(self) -> Bottleneck:
        """data or network when that exposed part is the larger one and at least 5% of the
        step; compute otherwise."""
        exposed = max(self.data_s, self.comm_s)
        if exposed < BOTTLENECK_SHARE * self.total_s:
            return "compute"
        return "data" if self.data_s >= self.comm_s else "network"


def step_time(work: Workload, cluster: Cluster) -> StepTime:
    """One step of `work` on `cluster` (see the module docstring for the equations)."""
    compute = work.compute.step_s(work.batch_per_gpu)
    cost = partial(
        ring_allreduce_seconds,
        nodes=cluster.nodes,
        gpus_per_node=cluster.gpus_per_node,
        net=cluster.net,
    )
    if cluster.gpus == 1:  # nothing to reduce, and no framework to wait for
        comm = 0.0
    else:
        comm = exposed_comm(
            work.costs,
            cost,
            cluster.bucketing,
            backward_s=compute * work.backward_fraction,
            bytes_per_param=work.grad_bytes,
        )
    load = work.batch_per_gpu * work.data_clip_s
    data = max(0.0, load - (compute + comm))
    return StepTime(compute, comm, data, allreduce_s=cost(work.model_bytes))


@dataclass(frozen=True)
class Prediction:
    """`step` on `gpus` GPUs, its speed, and the time to train `epochs` x `clips` clips.

    `efficiency` is the paper's scalability: clips/s over (one node's clips/s x nodes), one node
    running the same per-GPU batch.
    """

    nodes: int
    gpus: int
    batch_per_gpu: int
    step: StepTime
    clips_per_s: float
    one_node_clips_per_s: float
    epochs: float
    clips: int

    @property
    def global_batch(self) -> int:
        return self.gpus * self.batch_per_gpu

    @property
    def efficiency(self) -> float:
        return self.clips_per_s / (self.one_node_clips_per_s * self.nodes)

    @property
    def train_s(self) -> float:
        """Seconds to train: epochs x clips / speed (a fractional last step counted as such)."""
        return self.epochs * self.clips / self.clips_per_s

    @property
    def bottleneck(self) -> Bottleneck:
        return self.step.bottleneck


def clips_per_s(work: Workload, cluster: Cluster) -> float:
    return cluster.gpus * work.batch_per_gpu / step_time(work, cluster).total_s


def predict(work: Workload, cluster: Cluster, *, epochs: float, clips: int) -> Prediction:
    """`work` on `cluster`, with the one-node run it is measured against."""
    step = step_time(work, cluster)
    speed = cluster.gpus * work.batch_per_gpu / step.total_s
    one_node = speed if cluster.nodes == 1 else clips_per_s(work, cluster.with_nodes(1))
    return Prediction(
        nodes=cluster.nodes,
        gpus=cluster.gpus,
        batch_per_gpu=work.batch_per_gpu,
        step=step,
        clips_per_s=speed,
        one_node_clips_per_s=one_node,
        epochs=epochs,
        clips=clips,
    )


def calibrate_clip_seconds(
    measured_step_s: float, work: Workload, cluster: Cluster, *, fixed_clips: float = 0.0
) -> GpuCompute:
    """The compute (`clip_s`, `fixed_s = fixed_clips * clip_s`) under which the model's step of
    `work` on `cluster` lasts `measured_step_s` seconds.

    The step is increasing in `clip_s`, so bisection finds it; `work.compute` is ignored. Used
    with the paper's baseline (1 node x 6 GPUs x 16 clips, 0.719 s per step) the exposed
    intra-node all-reduce is taken out of the measured time rather than counted as compute.
    """
    if not measured_step_s > 0:
        raise ValueError(f"measured step must be > 0 s, got {measured_step_s}")

    def step_with(clip_s: float) -> float:
        compute = GpuCompute(clip_s=clip_s, fixed_s=fixed_clips * clip_s)
        return step_time(dataclasses.replace(work, compute=compute), cluster).total_s

    # At `high` the compute alone lasts the measured step, so the model's step is >= it.
    low, high = 0.0, measured_step_s / (work.batch_per_gpu + fixed_clips)
    if step_with(high * 1e-9) > measured_step_s:
        raise ValueError(
            f"a {measured_step_s:g} s step is shorter than the data loading or the exposed "
            "all-reduce alone; no compute time reproduces it"
        )
    for _ in range(60):
        mid = (low + high) / 2
        if mid > 0 and step_with(mid) > measured_step_s:
            high = mid
        else:
            low = mid
    clip_s = (low + high) / 2
    return GpuCompute(clip_s=clip_s, fixed_s=fixed_clips * clip_s)
