"""Retaining freed host memory: a repeated large allocation stops page-faulting."""

from __future__ import annotations

import multiprocessing as mp
import resource
import statistics
import sys

import pytest
import torch


def _faults_per_step(mode: str, queue: mp.Queue) -> None:
    from vidscale.fastpath.host_memory import retain_freed_host_memory, set_host_memory_retention

    applied = retain_freed_host_memory() if mode != "default" else False
    if mode == "retained, then off":
        applied = set_host_memory_retention(False)
    faults = []
    for _ in range(20):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        # Above 32 MiB, the most glibc's adaptive threshold ever keeps on the heap by default.
        buffers = [torch.ones(48 << 20, dtype=torch.uint8) for _ in range(2)]
        del buffers
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    # The heap settles after a few steps (5 to 9 seen: its free chunks are rearranged); then it
    # is steady. The median of the last 8 steps reads the steady state.
    queue.put((applied, statistics.median(faults[-8:])))


def faults_in_fresh_process(mode: str) -> tuple[bool, float]:
    # A fresh process: the allocator's settings are per process and cannot be undone.
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_faults_per_step, args=(mode, queue))
    proc.start()
    result = queue.get(timeout=120)
    proc.join(timeout=60)
    return result


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_retained_memory_is_reused_without_page_faults() -> None:
    applied, retained = faults_in_fresh_process("retained")
    _, default = faults_in_fresh_process("default")
    switched_off, off_again = faults_in_fresh_process("retained, then off")
    assert applied and switched_off
    pages = (96 << 20) // resource.getpagesize()
    assert default > pages // 2  # glibc maps 96 MiB afresh every step...
    assert retained < pages // 100  # ...with retention it reuses it...
    assert off_again > pages // 2  # ...and switched off (the bench's fp32 rows) maps it again
