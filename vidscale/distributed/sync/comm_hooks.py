"""Gradient communication options for DDP: fp16 / bf16 compression and PowerSGD.

The TSM paper's third guideline (§3c, network efficiency) is to send fewer bytes per step. These
hooks attach to DDP at one point (`attach_comm_hook`) and count the bytes each rank puts into the
all-reduce, so the saving is measured, not assumed.

- fp16/bf16: each gradient bucket is cast down, all-reduced, averaged and cast back. The built-in
  bf16 hook refuses non-NCCL builds; this one works on gloo too (gloo all-reduces bfloat16).
- PowerSGD (Vogels et al., 2019): rank-r low-rank approximation with error feedback, through
  torch's `powerSGD_hook` (the non-batched variant: the batched one is broken in torch 2.13).
  Its state (per-rank error residuals, warm-start factors, step counter) is checkpointed through
  the handle that `attach_comm_hook` returns, per parameter (`PowerSGDHook`), so that a resumed
  run is exact.

`CommHook.take()` reports, besides bytes, the seconds during which at least one of this rank's
gradient all-reduces was in flight, the part of them that the step waited for (exposed: not
hidden behind the backward pass) and the number of synchronised steps (`TrafficMeter`). Every
hook is timed, DDP's plain all-reduce (`comm.hook=none`) included: it runs as a Python hook
that reproduces DDP's native averaging bit for bit (`_mean_allreduce_hook`).

The settings and the handle live in `comm_handle`, the clock and the meter in `comm_timing`,
PowerSGD's handle and metered hook in `powersgd_hook`.
"""

# No `from __future__ import annotations`: DDP inspects hook annotations at registration.

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel

from vidscale.distributed.sync.comm_handle import CommConfig, CommHook, HookName
from vidscale.distributed.sync.comm_timing import (
    BucketTimes,
    Mark,
    TrafficMeter,
    exposed_seconds,
    mark,
    seconds_between,
    union_seconds,
)
from vidscale.distributed.sync.powersgd_hook import PowerSGDHook, powersgd_counting_hook

# The names the rest of the package imports from here, where they are defined (comm_handle,
# comm_timing) or used (the hooks).
__all__ = [
    "BucketTimes",
    "CommConfig",
    "CommHook",
    "HookName",
    "Mark",
    "attach_comm_hook",
    "exposed_seconds",
    "mark",
    "seconds_between",
    "union_seconds",
]


def _mean_allreduce_hook(meter: TrafficMeter) -> Any:
    """DDP's native gradient averaging as a Python hook, so that it can be timed.

    Each rank multiplies its bucket by 1/world and the buckets are summed. That is what DDP's
    reducer does without a hook when the gradients are fresh tensors each step (it multiplies
    each one by 1/world as it copies it into the bucket): with `zero_grad(set_to_none=True)`,
    as the trainer does, the gradients are bitwise identical to DDP's own (tested on 2 and 3
    gloo ranks, with gradient accumulation). torch's `allreduce_hook` divides by world
    instead, which differs from DDP in the last bit when world is not a power of two. With
    `zero_grad(set_to_none=False)` DDP divides the gradients in place in their bucket views
    (`gradient_as_bucket_view=True`), so this hook can then differ from it in the last bit
    on such world sizes.
    """

    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = state if state is not None else dist.group.WORLD

        def launch() -> torch.futures.Future[torch.Tensor]:
            buffer = bucket.buffer()
            buffer.mul_(1.0 / dist.get_world_size(group))
            meter.add_bytes(buffer.numel() * buffer.element_size())
            fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
            return fut.then(lambda f: f.value()[0])

        return meter.timed(bucket, launch)

    return hook


def _cast_hook(dtype: torch.dtype, meter: TrafficMeter) -> Any:
    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = state if state is not None else dist.group.WORLD

        def launch() -> torch.futures.Future[torch.Tensor]:
            world = dist.get_world_size(group)
            buffer = bucket.buffer()
            compressed = buffer.to(dtype).div_(world)
            meter.add_bytes(compressed.numel() * compressed.element_size())
            fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

            def decompress(f: torch.futures.Future[Any]) -> torch.Tensor:
                buffer.copy_(f.value()[0])
                return buffer

            return fut.then(decompress)

        return meter.timed(bucket, launch)

    return hook


def attach_comm_hook(model: Any, cfg: CommConfig) -> CommHook:
    """Register the configured hook on a DDP model; return its handle (traffic and state).

    Without DDP (one process) nothing is communicated: the traffic stays at zero and the
    state is empty.
    """
    meter = TrafficMeter()
    if not isinstance(model, DistributedDataParallel):
        return CommHook("none", meter)
    match cfg.hook:
        case "none":  # DDP's own averaging, in Python only to time it (bitwise the same)
            model.register_comm_hook(None, _mean_allreduce_hook(meter))
        case "fp16":
            model.register_comm_hook(None, _cast_hook(torch.float16, meter))
        case "bf16":
            model.register_comm_hook(None, _cast_hook(torch.bfloat16, meter))
        case "powersgd":
            # PowerSGDHook's per-parameter state assumes both (see its docstring).
            state = powersgd.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=cfg.powersgd_rank,
                start_powerSGD_iter=cfg.powersgd_start_step,
                use_error_feedback=True,
                warm_start=True,
            )
            handle = PowerSGDHook(model, meter, state)
            serialize = dist.get_backend() == "gloo"
            model.register_comm_hook(
                state, powersgd_counting_hook(meter, cfg, handle, serialize=serialize)
            )
            return handle
    return CommHook(cfg.hook, meter)
