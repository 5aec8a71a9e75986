"""Replica groups of `vidscale train-ft` for the fault-tolerance tests: the tiny run every group
trains (`vidscale.distributed.ft.launch` starts, kills and reads them), and the checks every
such test makes of what the groups logged and ended with."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.tiny_run import tiny_overrides
from vidscale.distributed.ft.launch import start_group as launch_group
from vidscale.distributed.ft.position import DataPosition
from vidscale.recipes import get_recipe

#: Every group's run: TSN-R18 on the tiny demo, one clip a process per step.
RUN = ["--recipe", "demo_tsm_r18_8f_b32_e12", "--set", "model.name=tsn_resnet18"]
TRAIN_VIDEOS = 16  # the tiny demo: 8 classes x 2
LR_PER_8 = get_recipe(RUN[1]).optim.lr_per_8_clips
WARMUP_EPOCHS = get_recipe(RUN[1]).lr.warmup_epochs
WARMUP_START = get_recipe(RUN[1]).lr.warmup_start_factor


def expected_lr(samples: int, clips_before: int, epochs: int) -> float:
    """The LR rule of `train.ft.replica`, written out: the linear-scaled peak of the step's
    samples, a linear warmup over the first WARMUP_EPOCHS of clips, then half a cosine to 0."""
    peak = LR_PER_8 * samples / 8
    warmup, total = round(WARMUP_EPOCHS * TRAIN_VIDEOS), epochs * TRAIN_VIDEOS
    if clips_before < warmup:
        return peak * (WARMUP_START + (1 - WARMUP_START) * clips_before / warmup)
    progress = (clips_before - warmup) / (total - warmup)
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


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
    **node: Any,
) -> subprocess.Popen:
    """Group `group` of the tiny run (batch 1 a process, `epochs` epochs); `node`: where it
    runs on a netlab cluster (`launch.start_group`'s prefix, address, device)."""
    overrides = [*tiny_overrides(data), "data.batch_size=1", f"train.epochs={epochs}"]
    run = [*RUN, *(x for o in overrides for x in ("--set", o))]
    return launch_group(
        group,
        groups,
        run=run,
        out=out,
        lighthouse=lighthouse,
        timeout_s=timeout_s,
        extra=extra,
        **node,
    )


def check_samples_once(logs: list[list[dict[str, Any]]], epochs: int) -> None:
    """Every epoch's committed steps take every training sample exactly once; every logged
    share is its process's slot of its step; groups that logged a step agree on it."""
    by_step: dict[int, dict[str, Any]] = {}
    for log in logs:
        for r in log:
            key = ("epoch", "start", "stop", "participants", "lr")
            seen = by_step.setdefault(r["step"], r)
            assert {k: seen[k] for k in key} == {k: r[k] for k in key}, r["step"]
    assert sorted(by_step) == list(range(1, len(by_step) + 1)), "a committed step is missing"
    for epoch in range(epochs):
        steps = sorted(
            (r for r in by_step.values() if r["epoch"] == epoch), key=lambda r: r["step"]
        )
        order = DataPosition(TRAIN_VIDEOS, 0, epoch=epoch).order()
        taken = [i for r in steps for i in order[r["start"] : r["stop"]]]
        assert sorted(taken) == list(range(TRAIN_VIDEOS)), f"epoch {epoch}: {taken}"
        assert [r["start"] for r in steps] == [0, *[r["stop"] for r in steps[:-1]]]
    for log in logs:
        for r in log:
            assert set(r["share"]) <= set(
                DataPosition(16, 0, epoch=r["epoch"]).order()[r["start"] : r["stop"]]
            )
            samples = r["stop"] - r["start"]
            clips_before = r["epoch"] * TRAIN_VIDEOS + r["start"]
            rule = expected_lr(samples, clips_before, epochs)
            assert r["lr"] == pytest.approx(rule, rel=1e-9)


def check_equal_final_states(out: Path, groups: int, epochs: int) -> None:
    states = [
        torch.load(out / "ft" / f"final-group{g}.rank0.pt", weights_only=True)
        for g in range(groups)
    ]
    assert states[0]["position"] == {
        "size": TRAIN_VIDEOS,
        "seed": 0,
        "epoch": epochs,
        "consumed": 0,
    }
    assert states[0]["optimizer"]["state"], "no momentum: the optimizer never stepped"
    assert any(k.endswith("running_mean") for k in states[0]["model"])
    for other in states[1:]:
        torch.testing.assert_close(other, states[0], rtol=0, atol=0)
