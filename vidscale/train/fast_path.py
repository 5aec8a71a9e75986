"""Device fast path: bf16 autocast, channels-last, cudnn benchmark, optional torch.compile.

`train.amp` / `train.channels_last` = "auto" turn them on where the hardware has bf16 matrix
units: CUDA GPUs (bf16 tensor cores) and CPUs with AVX512-BF16 or AMX. Elsewhere "auto" falls
back to fp32 and the default layout. `train.fast_path=false` switches all of it off at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch


@cache
def cpu_has_bf16_units() -> bool:
    """True when the CPU executes bf16 matrix products natively (AVX512-BF16 or AMX-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags for f in (" avx512_bf16", " amx_bf16"))


def device_has_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_has_bf16_units()


@dataclass(frozen=True)
class FastPath:
    device: torch.device
    bf16: bool
    channels_last: bool
    compile: bool

    def autocast(self) -> Callable[[], Any]:
        if not self.bf16:
            return contextlib.nullcontext
        device_type = self.device.type

        def ctx() -> Any:
            return torch.autocast(device_type=device_type, dtype=torch.bfloat16)

        return ctx

    def describe(self) -> str:
        return (
            f"device {self.device}, bf16 autocast {'on' if self.bf16 else 'off'}, "
            f"channels_last {'on' if self.channels_last else 'off'}, "
            f"compile {'on' if self.compile else 'off'}"
        )


def resolve_fast_path(
    device: torch.device, *, enabled: bool, amp: str, channels_last: str, compile: bool
) -> FastPath:
    """Turn the config's 'auto' / 'on' / 'off' switches into concrete choices for `device`."""
    if not enabled:
        return FastPath(device, bf16=False, channels_last=False, compile=False)
    capable = device_has_bf16(device)
    bf16 = amp == "bf16" or (amp == "auto" and capable)
    cl = channels_last == "on" or (channels_last == "auto" and capable)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed clip shapes within a phase
        set_tf32(True)
    return FastPath(device, bf16=bf16, channels_last=cl, compile=compile)


def set_tf32(enabled: bool) -> None:
    """Let CUDA float32 matmuls and convolutions use TF32 tensor cores (or not); process-wide."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def apply_to_model(model: torch.nn.Module, fast: FastPath) -> torch.nn.Module:
    """Move parameters to channels-last (4D convs; 5D I3D convs to channels-last-3d)."""
    if not fast.channels_last:
        return model
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    for param in model.parameters():
        fmt = formats.get(param.ndim)
        if fmt is not None:
            # empty_like gives the exact channels-last strides even for 1x1 kernels (which
            # `.contiguous(memory_format=...)` leaves as they are), so parameters, their
            # gradients and DDP's gradient buckets all agree on one layout.
            param.data = torch.empty_like(param.data, memory_format=fmt).copy_(param.data)
    return model
