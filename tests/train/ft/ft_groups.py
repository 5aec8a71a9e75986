"""Replica groups of `vidscale train-ft` for the fault-tolerance tests: the tiny run every group
trains (`vidscale.distributed.ft.launch` starts, kills and reads them)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.tiny_run import tiny_overrides
from vidscale.distributed.ft.launch import start_group as launch_group

#: Every group's run: TSN-R18 on the tiny demo, one clip a process per step.
RUN = ["--recipe", "demo_tsm_r18_8f_b32_e10", "--set", "model.name=tsn_resnet18"]


def start_group(
    group: int,
    groups: int,
    *,
    data: Path,
    out: Path,
    lighthouse: str,
    epochs: int,
    timeout_s: float = 5.0,
    extra: Sequence[str] = (),
) -> subprocess.Popen:
    """Group `group` of the tiny run (batch 1 a process, `epochs` epochs)."""
    overrides = [*tiny_overrides(data), "data.batch_size=1", f"train.epochs={epochs}"]
    run = [*RUN, *(x for o in overrides for x in ("--set", o))]
    return launch_group(
        group, groups, run=run, out=out, lighthouse=lighthouse, timeout_s=timeout_s, extra=extra
    )
