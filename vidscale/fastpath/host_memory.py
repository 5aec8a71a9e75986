"""Keep freed host memory in the process (glibc malloc), so CPU training does not page-fault.

glibc serves large requests (above a threshold that grows to at most 32 MB) with a fresh `mmap`
and gives the pages back on `free`. A CPU training step allocates and frees the same
activation-sized buffers every step, so each one is faulted in again, a page at a time, while the
kernel zeroes it; TSM, which keeps a shifted copy of each block input, loses more time to that
than TSN. Turning `mmap` off for the heap (`M_MMAP_MAX = 0`) and never trimming its top
(`M_TRIM_THRESHOLD`) keeps those pages mapped and reuses them, so a steady-state step takes no
minor page faults. The faults, step times and TSM/TSN ratios with and without it are in
docs/benchmarks.md, "Page faults on CPU: why host memory is retained". This is what jemalloc
and tcmalloc do for PyTorch CPU workloads, without preloading a library.

The cost is that a process's resident memory stays at its peak instead of shrinking, which is
what a training process does anyway. Other C libraries (musl, macOS) are left alone.
It is part of the CPU fast path: `train.fast_path=false` or `train.retain_host_memory=false`
switch it off; `vidscale bench models` sets it per timed call, on for the fast-path rows and off
for the fp32 rows.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from typing import cast

# mallopt option numbers from glibc's <malloc.h>; DEFAULT_MMAP_MAX from its malloc.c.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1
# glibc's adaptive mmap threshold rises to the size of freed mmapped blocks, at most 32 MiB,
# with the trim threshold at twice it: where it settles for activation-sized buffers.
_ADAPTED_MMAP_THRESHOLD = 32 << 20
_ADAPTED_TRIM_THRESHOLD = 64 << 20
_DEFAULT_MMAP_MAX = 65536


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's `mallopt`, looked up once (the benchmark sets it before every timed call)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int)
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int], int], fn)


def set_host_memory_retention(retain: bool) -> bool:
    """Keep and reuse freed memory (`retain`), or go back to glibc's default behaviour as its
    adaptive thresholds settle for large buffers (mmap above 32 MiB, trim above 64 MiB; once
    any threshold is set glibc stops adapting them). False where glibc's `mallopt` is not
    available or refused a setting."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    if retain:
        settings = [(M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, _INT_MAX)]
    else:
        settings = [
            (M_MMAP_THRESHOLD, _ADAPTED_MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, _ADAPTED_TRIM_THRESHOLD),
            (M_MMAP_MAX, _DEFAULT_MMAP_MAX),
        ]
    return all(mallopt(option, value) == 1 for option, value in settings)  # 1: success


def retain_freed_host_memory() -> bool:
    """Configure glibc malloc to keep and reuse freed memory; False where not applicable.

    It affects allocations made after the call (and, through fork, the data-loader workers
    started later).
    """
    return set_host_memory_retention(True)
