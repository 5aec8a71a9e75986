"""Device fast path: bf16 autocast, channels-last, cudnn benchmark, optional torch.compile.

`train.amp` and `train.channels_last` each take "auto" or an explicit setting. An explicit one is
used as given; the axes left at "auto" are decided by measuring the run's own model at its own
shape on this device (`fastpath.probe.decide`): bf16 autocast and channels-last pay off on large
clips and can cost a third of the step on small ones. `train.fast_path=false` switches all of it
off at once. This module holds the settings themselves (`Candidate`, `FastPath`) and how a
decision is applied to a model; CUDA runs also get TF32 and cudnn autotuning.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

# oneDNN's instruction-set caps (ONEDNN_MAX_CPU_ISA) that leave out its bf16 dot products: below
# AVX512_CORE_BF16, oneDNN computes bf16 by conversion to float32, slower than float32 itself.
# (AVX2_VNNI_2 converts bf16 natively but has no bf16 dot product.)
ONEDNN_ISAS_WITHOUT_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)


def cpu_flags_have_bf16() -> bool:
    """Whether the CPU itself has bf16 matrix units (AVX512-BF16 or AMX-BF16), per
    /proc/cpuinfo."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags for f in (" avx512_bf16", " amx_bf16"))


def bf16_capped_by_environment() -> str | None:
    """The variable that keeps torch's kernels off the CPU's bf16 units, or None.

    `ONEDNN_MAX_CPU_ISA` below AVX512_CORE_BF16 caps oneDNN (convolutions, and matrix products
    under autocast), `ATEN_CPU_CAPABILITY` below avx512 caps ATen's own kernels: with either,
    the CPU computes as one without bf16 units would (how an AVX2-only machine is emulated).
    """
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if isa in ONEDNN_ISAS_WITHOUT_BF16:
        return f"ONEDNN_MAX_CPU_ISA={isa}"
    aten = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if aten in ("default", "avx2", "avx", "zvector", "sve"):
        return f"ATEN_CPU_CAPABILITY={aten}"
    return None


@cache
def cpu_has_bf16_units() -> bool:
    """True when torch executes bf16 matrix products on this CPU natively: the CPU has
    AVX512-BF16 or AMX-BF16 and the environment does not cap torch's kernels below them
    (`bf16_capped_by_environment`)."""
    return cpu_flags_have_bf16() and bf16_capped_by_environment() is None


def device_has_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_has_bf16_units()


Setting = bool | None  # True / False as the config fixes it; None: "auto"


@dataclass(frozen=True)
class Candidate:
    """One setting "auto" can choose: bf16 autocast or not, channels-last parameters or not."""

    bf16: bool
    channels_last: bool

    @property
    def label(self) -> str:
        """The short name: fp32, fp32+cl, bf16 or bf16+cl."""
        return ("bf16" if self.bf16 else "fp32") + ("+cl" if self.channels_last else "")

    @classmethod
    def from_label(cls, label: str) -> Candidate:
        arithmetic, _, layout = label.partition("+")
        if arithmetic not in ("fp32", "bf16") or layout not in ("", "cl"):
            raise ValueError(f"not a fast-path setting: {label!r}")
        return cls(bf16=arithmetic == "bf16", channels_last=layout == "cl")


FP32 = Candidate(bf16=False, channels_last=False)


def requested(*, enabled: bool, amp: str, channels_last: str) -> tuple[Setting, Setting]:
    """(bf16, channels_last) as the config fixes them; None for an axis left at "auto"."""
    if not enabled:
        return False, False
    bf16 = None if amp == "auto" else amp == "bf16"
    cl = None if channels_last == "auto" else channels_last == "on"
    return bf16, cl


def candidates(device: torch.device, *, bf16: Setting, channels_last: Setting) -> list[Candidate]:
    """The settings a probe compares: every value of each "auto" axis (bf16 only where the
    device has bf16 units: elsewhere autocast emulates it, slower than fp32), the fixed value of
    the others. The first is the reference that ties go to: no bf16 unless asked for, the
    default layout."""
    if bf16 is not None:
        arithmetic = [bf16]
    else:
        arithmetic = [False, True] if device_has_bf16(device) else [False]
    layouts = [channels_last] if channels_last is not None else [False, True]
    return [Candidate(b, c) for b in arithmetic for c in layouts]


def hardware_rule(device: torch.device) -> Candidate:
    """What "auto" meant before it was measured: bf16 + channels-last where the device has
    bf16 units. A checkpoint written then records no decision; its run continues with this."""
    capable = device_has_bf16(device)
    return Candidate(bf16=capable, channels_last=capable)


@dataclass(frozen=True)
class FastPath:
    device: torch.device
    bf16: bool
    channels_last: bool
    compile: bool

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.bf16, self.channels_last)

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
    device: torch.device,
    *,
    enabled: bool,
    amp: str,
    channels_last: str,
    compile: bool,
    auto: Candidate | None = None,
) -> FastPath:
    """The config's 'auto' / 'on' / 'off' switches as concrete choices for `device`: explicit
    settings as given, "auto" axes from `auto`, the decision of `fastpath.probe.decide` (the
    trainer always passes one). Without one, "auto" follows `hardware_rule`, unmeasured."""
    if not enabled:
        return FastPath(device, bf16=False, channels_last=False, compile=False)
    bf16, cl = requested(enabled=enabled, amp=amp, channels_last=channels_last)
    auto = auto or hardware_rule(device)
    set_device_options(device)
    return FastPath(
        device,
        bf16=auto.bf16 if bf16 is None else bf16,
        channels_last=auto.channels_last if cl is None else cl,
        compile=compile,
    )


def set_device_options(device: torch.device) -> None:
    """What the fast path turns on process-wide, whatever it decides: on CUDA, TF32 and cudnn
    autotuning (clip shapes are fixed within a phase); nothing on the CPU."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        set_tf32(True)


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
