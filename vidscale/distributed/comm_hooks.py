"""Gradient communication options for DDP: fp16 / bf16 compression and PowerSGD.

The TSM paper's third guideline (§3c, network efficiency) is to send fewer bytes per step. These
hooks attach to DDP at one point (`attach_comm_hook`) and count the bytes each rank puts into the
all-reduce, so the saving is measured, not assumed.

- fp16/bf16: each gradient bucket is cast down, all-reduced, averaged and cast back. The built-in
  bf16 hook refuses non-NCCL builds; this one works on gloo too (gloo all-reduces bfloat16).
- PowerSGD (Vogels et al., 2019): rank-r low-rank approximation with error feedback, through
  torch's `powerSGD_hook` (the non-batched variant: the batched one is broken in torch 2.13).
"""

# No `from __future__ import annotations`: DDP inspects hook annotations at registration.

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel

HookName = Literal["none", "fp16", "bf16", "powersgd"]


@dataclass
class CommConfig:
    """How gradients cross the network (`--set comm.hook=bf16`)."""

    hook: HookName = "none"
    bucket_cap_mb: float = 25.0
    powersgd_rank: int = 2
    powersgd_start_step: int = 10  # plain all-reduce for the first steps (PowerSGD paper §4)

    def validate(self) -> None:
        if self.bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {self.bucket_cap_mb}")
        if self.powersgd_rank < 1:
            raise ValueError(f"powersgd_rank must be >= 1, got {self.powersgd_rank}")
        if self.powersgd_start_step < 2:
            # torch requires at least 2 warm-up iterations to build its buckets.
            raise ValueError(f"powersgd_start_step must be >= 2, got {self.powersgd_start_step}")


@dataclass
class ByteCounter:
    """Bytes this rank put into gradient all-reduces since the last `take()`.

    With DDP's native all-reduce (no hook) every synchronised step sends each gradient once:
    `native_bytes_per_step`, added by `take()`.
    """

    total: int = 0
    native_bytes_per_step: int = 0

    def add(self, n: int) -> None:
        self.total += n

    def take(self) -> int:
        n, self.total = self.total + self.native_bytes_per_step, 0
        return n


def _cast_hook(dtype: torch.dtype, counter: ByteCounter) -> Any:
    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = state if state is not None else dist.group.WORLD
        world = dist.get_world_size(group)
        buffer = bucket.buffer()
        compressed = buffer.to(dtype).div_(world)
        counter.add(compressed.numel() * compressed.element_size())
        fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

        def decompress(f: torch.futures.Future[Any]) -> torch.Tensor:
            buffer.copy_(f.value()[0])
            return buffer

        return fut.then(decompress)

    return hook


def _powersgd_bytes(bucket: dist.GradBucket, *, rank: int, compressing: bool) -> int:
    """Bytes PowerSGD all-reduces for `bucket`: P and Q factors for matrices, 1-D tensors raw."""
    if not compressing:
        return bucket.buffer().numel() * bucket.buffer().element_size()
    total = 0
    for grad in bucket.gradients():
        if grad.ndim <= 1:
            total += grad.numel() * grad.element_size()
        else:
            n, m = grad.shape[0], grad[0].numel()
            r = min(rank, n, m)
            total += (n + m) * r * grad.element_size()
    return total


def _powersgd_counting_hook(counter: ByteCounter, cfg: CommConfig, *, serialize: bool) -> Any:
    """torch's PowerSGD hook, counting its bytes.

    The hook chains three all-reduces per bucket (uncompressed 1-D tensors, then P, then Q),
    issuing the later ones from future callbacks. Gloo runs those callbacks on its own threads,
    so with several buckets in flight two ranks can issue the same collectives in different
    orders, which gloo detects as a size mismatch and aborts. `serialize` (gloo) waits for each
    bucket's chain before returning, so every rank issues collectives in bucket order; it gives
    up the overlap of communication with the rest of the backward pass, not correctness.
    """

    def hook(
        state: powersgd.PowerSGDState, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        compressing = state.iter >= state.start_powerSGD_iter
        counter.add(_powersgd_bytes(bucket, rank=cfg.powersgd_rank, compressing=compressing))
        fut = powersgd.powerSGD_hook(state, bucket)
        if not serialize:
            return fut
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(fut.wait())
        return done

    return hook


def attach_comm_hook(model: Any, cfg: CommConfig) -> ByteCounter:
    """Register the configured hook on a DDP model; return its byte counter.

    Without DDP (one process) nothing is communicated and the counter stays at zero.
    """
    counter = ByteCounter()
    if not isinstance(model, DistributedDataParallel):
        return counter
    match cfg.hook:
        case "none":  # DDP's own C++ all-reduce: fastest, and its bytes are known up front
            counter.native_bytes_per_step = sum(
                p.numel() * p.element_size() for p in model.parameters() if p.requires_grad
            )
        case "fp16":
            model.register_comm_hook(None, _cast_hook(torch.float16, counter))
        case "bf16":
            model.register_comm_hook(None, _cast_hook(torch.bfloat16, counter))
        case "powersgd":
            state = powersgd.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=cfg.powersgd_rank,
                start_powerSGD_iter=cfg.powersgd_start_step,
                use_error_feedback=True,
                warm_start=True,
            )
            serialize = dist.get_backend() == "gloo"
            model.register_comm_hook(
                state, _powersgd_counting_hook(counter, cfg, serialize=serialize)
            )
    return counter
