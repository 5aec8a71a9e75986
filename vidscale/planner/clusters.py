"""Hardware presets for the scaling model, every number with its source.

A preset is a node (GPU kind, GPUs per node, the intra-node link) and the network between nodes
(per-node injection bandwidth, an achieved fraction of line rate, hop latencies), plus the
framework that packs gradients. The GPU's speed is given as a measured TSM-ResNet-50 training
step at a reference batch (`Reference`), from which `gpu_compute` derives the per-clip compute of
any registry model; a preset without a measurement needs `--step-time` (or `--measured`). The
`local` preset is this machine's CPU processes, whose compute and network come from a
`vidscale bench scaling` run on it (`plan --measured`) or from the flags.

Shared sources:
- [nccl] NCCL's cost model, `src/graph/tuning.cc` (NCCL 2.7): ring/Simple hop latencies 3.4 us
  (NVLink), 5.7 us (PCIe), 9.6 us (network), base 8.4 us; its comment "256k/12GB/s" for a PCIe
  hop; its cap of 235 GB/s on the intra-node bus bandwidth of A100 (`compCap80`).
- [nccl-tests#29] NCCL's maintainer on one 100 Gb/s EDR adapter: "12.2 GB/s ... is as good as
  you can get", i.e. 97.6% of the 12.5 GB/s line rate; used for every InfiniBand preset.
- [dle] NVIDIA DeepLearningExamples, MXNet ResNet-50 v1.5 README, "Inference performance:
  NVIDIA DGX-1 (1x V100 16GB)" and "DGX A100 (1x A100 80GB)", and its training tables.
- [tsm] Lin, Gan, Han, "Training Kinetics in 15 Minutes" (the TSM paper): §4.1, Table 1, Table 3.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from vidscale.errors import InputError
from vidscale.models.costs import model_costs
from vidscale.planner.allreduce import GB, NCCL_HOP_US, US, Interconnect
from vidscale.planner.overlap import Bucketing, Framework, horovod
from vidscale.planner.scaling_model import Cluster, GpuCompute, Workload, calibrate_clip_seconds

REFERENCE_MODEL = "tsm_resnet50"
RESNET50_MACS = 4_089_184_256  # ResNet-50, one 224x224 image (`vidscale info resnet50`)

# Table 1 of the TSM paper: inference throughput on one P100 at batch 16 (videos/s). Their ratio,
# times the MAC ratio, is each model's hardware utilisation relative to TSM (§3a, Fig. 3a).
TABLE1_THROUGHPUT = {"tsm_resnet50": 84.8, "i3d_resnet50_3x3x3": 63.1, "i3d_resnet50_3x1x1": 41.9}


def fixed_images(batch_a: int, rate_a: float, batch_b: int, rate_b: float) -> float:
    """Per-step overhead, in images of work, of the line t(b) = b * t_img + t_fixed through two
    measured throughputs (images/s at batches a < b)."""
    t_a, t_b = batch_a / rate_a, batch_b / rate_b
    t_img = (t_b - t_a) / (batch_b - batch_a)
    return (t_a - batch_a * t_img) / t_img


# [dle] V100 16GB FP32 inference = mixed-precision images/s / its speed-up column:
# 3234 / 2.74 at batch 64 and 3362 / 2.69 at batch 128 -> 8.0 images of fixed work per step.
V100_FIXED_IMAGES = fixed_images(64, 3234 / 2.74, 128, 3362 / 2.69)
# [dle] A100 80GB mixed precision inference: 7659.96 at 64, 8017.67 at 128 -> 6.3 images.
A100_FIXED_IMAGES = fixed_images(64, 7659.96, 128, 8017.67)


@dataclass(frozen=True)
class Reference:
    """A measured TSM-ResNet-50 (8 x 224^2) training step: `step_s` seconds at `batch` clips
    per GPU on one node of `gpus` GPUs (their intra-node all-reduce included), or, `estimate`d,
    derived from another GPU's. `source` says where it comes from."""

    step_s: float
    batch: int
    gpus: int
    source: str
    estimate: bool = False


@dataclass(frozen=True)
class Hardware:
    """A cluster kind. Bandwidths are per direction: `intra_gbs` GB/s from one GPU to its ring
    neighbour in a node, `inter_gbps` Gb/s of line rate per node (all adapters), of which
    `inter_efficiency` is achieved; None where the preset has no network rate (it must be
    measured). `device` is what computes: GPUs, or CPU processes (`local`)."""

    name: str
    description: str
    gpu: str
    gpus_per_node: int
    intra_gbs: float
    inter_gbps: float | None
    inter_efficiency: float
    intra_hop_us: float
    inter_hop_us: float
    framework: Framework
    fixed_images: float
    reference: Reference | None
    max_nodes: int
    sources: tuple[str, ...]
    device: Literal["gpu", "cpu"] = "gpu"

    def interconnect(
        self, *, bandwidth_gbps: float | None = None, latency_us: float | None = None
    ) -> Interconnect:
        """The preset's links; `bandwidth_gbps` replaces the achieved per-node injection rate,
        `latency_us` the network hop latency (measured values)."""
        if bandwidth_gbps is not None:
            inter = bandwidth_gbps
        elif self.inter_gbps is None:
            raise InputError(f"hardware {self.name!r} has no network rate: pass --bandwidth-gbps")
        else:
            inter = self.inter_gbps * self.inter_efficiency
        return Interconnect(
            intra_bandwidth=self.intra_gbs * GB,
            inter_bandwidth=math.inf if math.isinf(inter) else inter / 8 * GB,
            intra_hop_latency=self.intra_hop_us * US,
            inter_hop_latency=(latency_us if latency_us is not None else self.inter_hop_us) * US,
        )

    def bucketing(
        self, *, framework: Framework | None = None, bucket_mb: float | None = None
    ) -> Bucketing:
        framework = framework or self.framework
        base = horovod() if framework == "horovod" else Bucketing()
        return base if bucket_mb is None else dataclasses.replace(base, bucket_mb=bucket_mb)

    def cluster(
        self, *, nodes: int, gpus_per_node: int | None = None, **net: float | None
    ) -> Cluster:
        return Cluster(
            nodes=nodes,
            gpus_per_node=gpus_per_node or self.gpus_per_node,
            net=self.interconnect(**net),
            bucketing=self.bucketing(),
        )


SUMMIT = Hardware(
    name="summit",
    description="OLCF Summit: 6 V100 16GB per node, NVLink 2.0, dual-rail EDR InfiniBand",
    gpu="V100-SXM2-16GB",
    gpus_per_node=6,
    # Inside a node the ring crosses from one POWER9 socket's three GPUs to the other's over the
    # X-Bus, 64 GB/s both ways (32 GB/s each way), the narrowest hop; the GPUs of a socket are
    # joined by dual NVLink bricks, 2 x 25 GB/s each way (paper §4.1, quoting the guide).
    intra_gbs=32.0,
    inter_gbps=200.0,  # two EDR adapters (rails) of 100 Gb/s per node
    inter_efficiency=12.2 / 12.5,  # [nccl-tests#29]
    intra_hop_us=NCCL_HOP_US["nvlink"],
    inter_hop_us=NCCL_HOP_US["net"],
    framework="horovod",  # paper §4.1: PyTorch + Horovod, ring all-reduce over NCCL
    fixed_images=V100_FIXED_IMAGES,
    # Table 3's baseline: 1 node x 6 GPUs x 16 clips, 100 epochs of ~240k clips in 49 h 55 min:
    # 179,700 s / (100 x 240,000 / 96) = 0.7188 s per step (paper §4.1-4.2, Table 3).
    reference=Reference(
        step_s=(49 * 3600 + 55 * 60) / (100 * 240_000 / 96),
        batch=16,
        gpus=6,
        source="TSM paper Table 3 baseline: 49 h 55 min for 100 epochs of 240k clips at batch 96",
    ),
    max_nodes=4608,  # "approximately 4,600 compute nodes" (paper §4.1)
    sources=(
        "OLCF Summit user guide (https://www.olcf.ornl.gov/for-users/system-user-guides/summit/"
        "summit-user-guide), cited by the paper: 6 V100 per node, dual NVLink bricks of "
        "25 GB/s each way, nodes on a non-blocking fat tree of dual-rail EDR InfiniBand",
        "IBM X-Bus between the two POWER9 sockets: 64 GB/s bidirectional (WikiChip, Summit)",
        "[nccl-tests#29] 12.2 of 12.5 GB/s per EDR adapter; [nccl] hop latencies",
        "[dle] V100 FP32: 8.0 ResNet-50 images of fixed work per step",
    ),
)

PAPER_P100 = Hardware(
    name="paper-p100",
    description="the TSM paper's Fig. 3c cluster: 8 nodes of 4 P100 (interconnect assumed: "
    "10 GbE at 85%)",
    gpu="P100",
    gpus_per_node=4,  # paper §3c: "Each computer has 4 NVIDIA TESLA P100 GPUs"
    intra_gbs=12.0,  # PCIe 3.0 x16, 15.75 GB/s line; [nccl] models a PCIe hop at 12 GB/s
    # Not given by the paper. Assumed: 10 Gb/s Ethernet per node of which NCCL's socket transport
    # reaches 85%. The paper's Fig. 3c (TSM >= 98%, I3D 3x3x3 < 85% at 8 nodes) holds in this
    # model only for about 7.9-9.1 Gb/s achieved at 8 clips per GPU; 8.5 is that window's middle
    # (`paper_scaling.fig3c_window`, docs/scaling.md).
    inter_gbps=10.0,
    inter_efficiency=0.85,
    intra_hop_us=NCCL_HOP_US["pci"],
    inter_hop_us=NCCL_HOP_US["net"],
    framework="horovod",
    fixed_images=V100_FIXED_IMAGES,  # no P100 measurement: the V100's, assumed
    # Table 1: 84.8 videos/s inference at batch 16 on one P100; a training step is taken as three
    # forward passes of work (backward = 2 x forward MACs): 3 x 16 / 84.8 s at 16 clips.
    reference=Reference(
        step_s=3 * 16 / 84.8,
        batch=16,
        gpus=1,
        source="TSM paper Table 1: 84.8 V/s inference on one P100 at batch 16, x3 for training",
    ),
    max_nodes=8,
    sources=(
        "TSM paper §3c and Fig. 3c: 8 nodes x 4 P100; Table 1 throughputs",
        "PCIe 3.0 x16 and [nccl]'s 12 GB/s PCIe hop; network assumed (see docs/scaling.md)",
    ),
)

# [dle] ResNet-50 training, 1 GPU: V100 FP32 384 img/s; A100 80GB mixed precision 3410.52 img/s.
# A modern run trains in bf16 where the paper's Summit run was FP32 (2019 PyTorch); the A100's
# TSM step is estimated as Summit's scaled by that throughput ratio.
A100_SPEEDUP_OVER_SUMMIT = 3410.52 / 384

DGX_A100 = Hardware(
    name="dgx-a100",
    description="8 A100 80GB per node, NVLink 3 / NVSwitch, 8 x 200 Gb/s HDR InfiniBand",
    gpu="A100-SXM4-80GB",
    gpus_per_node=8,
    intra_gbs=235.0,  # [nccl] caps A100 intra-node bus bandwidth at 235 GB/s (600 GB/s NVLink)
    inter_gbps=8 * 200.0,  # DGX A100 datasheet: 8 single-port ConnectX-6 HDR 200 Gb/s (compute)
    inter_efficiency=12.2 / 12.5,  # [nccl-tests#29]'s ratio, assumed for HDR
    intra_hop_us=NCCL_HOP_US["nvlink"],
    inter_hop_us=NCCL_HOP_US["net"],
    framework="ddp",
    fixed_images=A100_FIXED_IMAGES,
    reference=None,  # filled below from Summit's (an estimate)
    max_nodes=4096,
    sources=(
        "NVIDIA DGX A100 datasheet: 8 A100, NVSwitch (600 GB/s NVLink per GPU), 8 x HDR 200 Gb/s",
        "[nccl] 235 GB/s intra-node cap; [nccl-tests#29] achieved fraction",
        "[dle] A100 mixed precision: 6.3 ResNet-50 images of fixed work per step; "
        "3410.52 vs V100 FP32 384 img/s training",
    ),
)

DGX_H100 = Hardware(
    name="dgx-h100",
    description="8 H100 SXM per node, NVLink 4 / NVSwitch, 8 x 400 Gb/s NDR InfiniBand",
    gpu="H100-SXM5-80GB",
    gpus_per_node=8,
    # H100 SXM datasheet: NVLink 900 GB/s per GPU (450 each way); the A100's achieved 235 of 300
    # GB/s each way (78%) is assumed, giving 353 GB/s.
    intra_gbs=450.0 * 235.0 / 300.0,
    inter_gbps=8 * 400.0,  # DGX H100: 8 ConnectX-7 NDR 400 Gb/s for the compute fabric
    inter_efficiency=12.2 / 12.5,
    intra_hop_us=NCCL_HOP_US["nvlink"],
    inter_hop_us=NCCL_HOP_US["net"],
    framework="ddp",
    fixed_images=A100_FIXED_IMAGES,  # no H100 measurement: the A100's, assumed
    reference=None,  # no sourced TSM or ResNet-50 training rate: pass --step-time
    max_nodes=4096,
    sources=(
        "NVIDIA H100 SXM datasheet (NVLink 900 GB/s) and DGX H100 (8 x ConnectX-7 400 Gb/s)",
        "A100's NVLink efficiency and fixed work assumed; no compute rate (measure it)",
    ),
)


# This machine, for plans fed by `vidscale bench scaling` on it (`plan --measured`): every
# process is a "node" of one, so that the ring all-reduce between processes runs over the
# network term (loopback TCP, gloo) and the efficiency is bench scaling's (speed over one
# process's speed x processes). Nothing here is a measurement: the compute and the loopback
# bandwidth come from --measured (its 1-process run and its multi-process plain-DDP run) or from
# --step-time and --bandwidth-gbps.
LOCAL = Hardware(
    name="local",
    description="this machine's CPU: one process per node, gloo all-reduce over loopback TCP "
    "(compute and bandwidth measured: --measured, or --step-time and --bandwidth-gbps)",
    gpu="CPU process",
    gpus_per_node=1,
    intra_gbs=math.inf,  # no intra-node hop: one process per node
    inter_gbps=None,  # measured (bench scaling's all-reduce time) or --bandwidth-gbps
    inter_efficiency=1.0,  # the measured rate is an achieved one
    intra_hop_us=0.0,
    # Assumed: one loopback TCP message, of the order of 20 us; next to the bandwidth term of a
    # gradient all-reduce (0.4 s for 97 MB at 2 Gb/s) it does not matter. --latency-us replaces it.
    inter_hop_us=20.0,
    framework="ddp",  # bench scaling and `vidscale train` run DDP over gloo on CPU
    # Assumed: a CPU step's time is proportional to its clips (no GPU occupancy effect); only
    # used when the planned batch differs from the measured one.
    fixed_images=0.0,
    reference=None,  # measured: --measured or --step-time
    max_nodes=os.cpu_count() or 1,  # one process per core of this machine
    sources=(
        "`vidscale bench scaling` on this machine (plan --measured): compute from its "
        "1-process run, loopback all-reduce bandwidth from its multi-process plain-DDP run",
        "assumed: 20 us per loopback TCP hop; no fixed per-step work on a CPU",
    ),
    device="cpu",
)


@lru_cache(maxsize=16)
def reference_compute(hw: Hardware) -> GpuCompute:
    """The GPU's TSM-ResNet-50 compute: its `Reference` step inverted through the model. For
    Summit this takes the exposed NVLink all-reduce of the paper's one-node baseline out of its
    0.719 s step rather than counting it as compute."""
    if hw.reference is None:
        raise InputError(f"hardware {hw.name!r} has no measured step")
    ref = hw.reference
    tsm = model_costs(REFERENCE_MODEL)
    fixed_clips = hw.fixed_images * RESNET50_MACS / tsm.macs
    work = Workload(costs=tsm, batch_per_gpu=ref.batch, compute=GpuCompute(clip_s=1.0))
    cluster = hw.cluster(nodes=1, gpus_per_node=ref.gpus)
    return calibrate_clip_seconds(ref.step_s, work, cluster, fixed_clips=fixed_clips)


def _a100_reference() -> Reference:
    step = reference_compute(SUMMIT).step_s(8) / A100_SPEEDUP_OVER_SUMMIT
    return Reference(
        step_s=step,
        batch=8,
        gpus=1,
        source="Summit's calibrated TSM step / 8.9 ([dle] A100 mixed precision vs V100 FP32 "
        "ResNet-50 training throughput)",
        estimate=True,
    )


PRESETS: dict[str, Hardware] = {
    hw.name: hw for hw in (SUMMIT, PAPER_P100, DGX_A100, DGX_H100, LOCAL)
}


def hardware(name: str) -> Hardware:
    """The preset `name` (the A100's reference is derived from Summit's on first use)."""
    if name not in PRESETS:
        raise ValueError(f"unknown hardware {name!r}; known: {', '.join(sorted(PRESETS))}")
    hw = PRESETS[name]
    if hw is DGX_A100:
        return dataclasses.replace(hw, reference=_a100_reference())
    return hw


def utilisation(model: str) -> float | None:
    """Hardware utilisation of `model` relative to TSM's, from Table 1 (achieved MACs/s ratio),
    or None for a model the paper did not measure."""
    if model not in TABLE1_THROUGHPUT:
        return None
    ratio = TABLE1_THROUGHPUT[model] / TABLE1_THROUGHPUT[REFERENCE_MODEL]
    return ratio * model_costs(model).macs / model_costs(REFERENCE_MODEL).macs


def relative_work(model: str, base: str, *, frames: int | None = None) -> float:
    """GPU time per clip of `model` over `base`'s: the MAC ratio over the utilisation ratio
    (Table 1; TSM's utilisation for a model it lacks)."""
    macs = model_costs(model, frames=frames).macs / (utilisation(model) or 1.0)
    return macs / (model_costs(base).macs / (utilisation(base) or 1.0))


def gpu_compute(model: str, hw: Hardware, *, frames: int | None = None) -> GpuCompute:
    """`model`'s per-clip compute on `hw`'s GPU: TSM's, scaled by the MAC ratio and divided by
    the relative utilisation of Table 1 (1 for a model Table 1 lacks: TSM's is assumed). The
    fixed per-step part is the same amount of work as TSM's (kernel launches and occupancy do
    not depend on the model's arithmetic)."""
    tsm = reference_compute(hw)
    clip_s = tsm.clip_s * relative_work(model, REFERENCE_MODEL, frames=frames)
    return GpuCompute(clip_s=clip_s, fixed_s=tsm.fixed_s)
