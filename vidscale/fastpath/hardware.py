"""The machine a benchmark runs on: what it is, how busy it is, and its measured peak FLOP/s.

The TSM paper (§3a) defines hardware utilisation as achieved FLOP/s over peak FLOP/s. A
datasheet peak is meaningless for a shared CPU or a throttled GPU, so the peak here is measured
in the same run as the models: the FLOP/s of a large square matmul in the same dtype, the
operation every library tunes best.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vidscale.fastpath.settings import device_has_bf16, set_tf32

DEFAULT_PEAK_SIZE = {"cpu": 2048, "cuda": 8192}


def resolve_device(name: str | torch.device) -> torch.device:
    """ "auto" is CUDA when available, else the CPU; anything else is passed to torch.device."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        # An index, so that every consumer (a probe's child process too) names the same GPU.
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so wall-clock time covers the work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> float | None:
    """1-minute load average (runnable processes); above the core count means contention."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def minor_page_faults() -> float:
    """Minor page faults of this process so far (NaN where the OS does not count them).

    On CPU a step that page-faults its activation buffers back in each time runs far slower
    than the steady state of a training loop (see `fastpath/host_memory.py`), so benchmarks count
    them per call.
    """
    try:
        import resource
    except ImportError:  # not on this OS
        return float("nan")
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def describe(device: torch.device) -> dict[str, Any]:
    """JSON-ready facts that decide how comparable two benchmark runs are."""
    return {
        "device": str(device),
        "name": device_name(device),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "bf16_units": device_has_bf16(device),
        "torch": torch.__version__,
        "load_average": load_average(),
    }


def matmul_probe(
    device: torch.device, *, dtype: torch.dtype, size: int, tf32: bool = False
) -> tuple[Callable[[], None], int]:
    """A callable running one size x size x size matmul in `dtype`, and its FLOPs (2·size³).

    `tf32` is the setting of the rows this is the peak of (float32 on CUDA only).
    """
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)

    def run() -> None:
        # TF32 is process-wide while the rows interleave float32 (off) and fast-path (on)
        # calls, so every timed call sets it.
        set_tf32(tf32)
        torch.mm(a, b, out=out)

    return run, 2 * size**3
