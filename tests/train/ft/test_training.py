"""Fault-tolerant replica groups (`vidscale train-ft`, `vidscale.train.ft.training`) with real
processes: torchrun jobs over gloo, a real lighthouse, SIGKILL.

What is checked, from each group's step log and final state: the group that is not killed is
never restarted and keeps committing steps alone while the other is away; the killed group,
started again, takes the live peer's state and rejoins; every replica ends with the same model,
optimizer state, BN buffers and data position (exactly equal); in every epoch every sample is
taken by exactly one committed step; the LR follows the step's global batch. And the
lighthouse's death stops every group in one line, keeping its last committed state, from which
the same commands continue.
"""

from __future__ import annotations

import os
import signal
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.multiproc import free_port
from tests.train.ft.ft_groups import (
    RUN,
    TRAIN_VIDEOS,
    check_equal_final_states,
    check_samples_once,
    start_group,
)
from vidscale.cli import main
from vidscale.cli.ft_cmd import QUORUM_TIMEOUT_EXIT_CODE
from vidscale.distributed.ft.launch import Lighthouse, finish, kill_group, records, wait_for
from vidscale.distributed.ft.position import DataPosition

FT_ARGS = ["train-ft", *RUN, "--out", "unused", "--lighthouse", "127.0.0.1:1"]


@pytest.mark.slow
def test_a_killed_group_rejoins_while_the_other_keeps_stepping(
    tiny_demo: Path, tmp_path: Path
) -> None:
    epochs = 8
    lighthouse = Lighthouse.start(tmp_path / "lighthouse.log")
    try:
        start = partial(
            start_group, data=tiny_demo, out=tmp_path, lighthouse=lighthouse.address, epochs=epochs
        )
        survivor = start(0, 2)
        victim = start(1, 2)
        wait_for(lambda: len(records(tmp_path, 1)) >= 4, 120, "group 1's 4th step")
        kill_group(victim)
        killed_after = len(records(tmp_path, 1))
        last_before = records(tmp_path, 1)[-1]["step"]
        back = start(1, 2)
        assert finish(survivor, 180, tmp_path, 0) == 0
        assert finish(back, 60, tmp_path, 1) == 0
    finally:
        lighthouse.kill()
    alone, rejoined = records(tmp_path, 0), records(tmp_path, 1)[killed_after:]
    # The survivor's one process committed every step, and some alone (the other away).
    # (It may have started second and healed from group 1 at its first step.)
    steps = [r["step"] for r in alone]
    assert steps == list(range(steps[0], steps[0] + len(steps)))
    away = [r for r in alone if r["step"] > last_before and r["participants"] == 1]
    assert away, "the survivor did not step while group 1 was away"
    # The restarted group took the live state at a later step and stepped with the survivor.
    assert rejoined and rejoined[0]["healed"] and rejoined[0]["step"] > last_before + len(away) - 1
    assert any(r["participants"] == 2 for r in rejoined)
    check_samples_once([alone, records(tmp_path, 1)], epochs)
    check_equal_final_states(tmp_path, 2, epochs)


@pytest.mark.slow
def test_the_lighthouse_dying_stops_every_group_which_then_continue(
    tiny_demo: Path, tmp_path: Path
) -> None:
    """The lighthouse is the one part no group can step without: every group stops in one
    line (exit 3) keeping its last committed state; a new lighthouse on the same address and
    the same commands finish the run as if nothing had happened to the data or the state."""
    epochs = 3
    lighthouse = Lighthouse.start(tmp_path / "lighthouse.log")
    start = partial(
        start_group,
        data=tiny_demo,
        out=tmp_path,
        lighthouse=lighthouse.address,
        epochs=epochs,
        timeout_s=2.0,
    )
    groups = [start(g, 2) for g in range(2)]
    try:
        wait_for(lambda: min(len(records(tmp_path, g)) for g in range(2)) >= 2, 120, "2 steps each")
        lighthouse.kill()
        assert [finish(p, 60, tmp_path, g) for g, p in enumerate(groups)] == [1, 1]
    finally:
        lighthouse.kill()
    for g in range(2):
        log = (tmp_path / f"group{g}.log").read_text()
        assert (
            f"vidscale: group {g}: the lighthouse at {lighthouse.address} stopped answering" in log
        )
        assert (tmp_path / "ft" / f"stopped-group{g}.rank0.pt").exists()
    stopped_at = [records(tmp_path, g)[-1]["step"] for g in range(2)]
    port = int(lighthouse.address.rsplit(":", 1)[1])
    lighthouse = Lighthouse.start(tmp_path / "lighthouse.log", port=port)
    try:
        groups = [start(g, 2) for g in range(2)]
        assert [finish(p, 120, tmp_path, g) for g, p in enumerate(groups)] == [0, 0]
    finally:
        lighthouse.kill()
    logs = [records(tmp_path, g) for g in range(2)]
    for g, group_log in enumerate(logs):
        steps = [r["step"] for r in group_log]
        assert steps == sorted(set(steps)), "a step committed twice"
        # Continued from its own last committed step, or healed from a peer one step ahead.
        first = next(r for r in group_log if r["step"] > stopped_at[g])
        assert first["step"] == stopped_at[g] + 1 or first["healed"]
    check_samples_once(logs, epochs)
    check_equal_final_states(tmp_path, 2, epochs)


def test_one_group_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*FT_ARGS, "--groups", "1", "--group", "0"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("vidscale: error: --groups: 1: a fault-tolerant run needs at least 2")


def test_no_lighthouse_reachable_is_refused_in_one_line(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # nothing listens there
    args = [*FT_ARGS, "--groups", "2", "--group", "0", "--data", str(tiny_demo)]
    code = main([*args, "--out", str(tmp_path), "--lighthouse", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(
        f"vidscale: error: --lighthouse: no lighthouse reachable at 127.0.0.1:{port}"
    )


@pytest.mark.slow
def test_aavg_drops_a_killed_group_from_the_averaging_not_the_run(
    tiny_demo: Path, tmp_path: Path
) -> None:
    """AAVG through the quorum (K = 2, moments every 4): a group killed between averagings is
    left out of that averaging, the survivor keeps going, the restarted group heals and joins
    the next; the replicas end equal (BN statistics and momentum included) and every sample is
    taken once."""
    epochs = 8
    lighthouse = Lighthouse.start(tmp_path / "lighthouse.log")
    aavg = ("--average-every", "2", "--moments-every", "4")
    try:
        start = partial(
            start_group,
            data=tiny_demo,
            out=tmp_path,
            lighthouse=lighthouse.address,
            epochs=epochs,
            extra=aavg,
        )
        survivor = start(0, 2)
        victim = start(1, 2)
        wait_for(lambda: len(records(tmp_path, 1)) >= 4, 120, "group 1's 4th local step")
        kill_group(victim)
        killed_after = len(records(tmp_path, 1))
        last_round = records(tmp_path, 1)[-1]["round"]
        back = start(1, 2)
        assert finish(survivor, 180, tmp_path, 0) == 0
        assert finish(back, 60, tmp_path, 1) == 0
    finally:
        lighthouse.kill()
    alone, rejoined = records(tmp_path, 0), records(tmp_path, 1)[killed_after:]
    rounds = sorted({r["round"] for r in alone})
    assert rounds == list(range(rounds[0], rounds[0] + len(rounds)))
    assert any(r["participants"] == 1 for r in alone if r["round"] > last_round)
    assert rejoined and rejoined[0]["healed"] and rejoined[0]["round"] > last_round
    check_rounds_take_samples_once([alone, records(tmp_path, 1)], epochs)
    check_equal_final_states(tmp_path, 2, epochs)


def check_rounds_take_samples_once(logs: list[list[dict[str, Any]]], epochs: int) -> None:
    """Every epoch's committed local steps (each logged by every group present in its round)
    take every training sample exactly once."""
    steps = {(r["round"], r["start"]): r for log in logs for r in log}
    for epoch in range(epochs):
        order = DataPosition(TRAIN_VIDEOS, 0, epoch=epoch).order()
        mine = [r for r in steps.values() if r["epoch"] == epoch]
        taken = [i for r in mine for i in order[r["start"] : r["stop"]]]
        assert sorted(taken) == list(range(TRAIN_VIDEOS)), f"epoch {epoch}: {taken}"


@pytest.mark.slow
def test_a_quorum_that_times_out_ends_the_group_in_one_line_not_as_bad_input(
    tiny_demo: Path, tmp_path: Path
) -> None:
    """A lighthouse that accepts connections but never answers (stopped, as a hung one is):
    the group's quorum outlasts --timeout, and the group says so in its own line and status,
    not as `vidscale: error:` (which names bad input)."""
    lighthouse = Lighthouse.start(tmp_path / "lighthouse.log")
    os.kill(lighthouse.process.pid, signal.SIGSTOP)
    try:
        group = start_group(
            0,
            2,
            data=tiny_demo,
            out=tmp_path,
            lighthouse=lighthouse.address,
            epochs=1,
            timeout_s=2.0,
        )
        code = finish(group, 120, tmp_path, 0)
    finally:
        os.kill(lighthouse.process.pid, signal.SIGCONT)
        lighthouse.kill()
    lines = (tmp_path / "group0.log").read_text().splitlines()
    said = [line for line in lines if line.startswith("vidscale: group 0: ")]
    assert code != 0 and len(said) == 1, lines[-20:]
    assert said[0].startswith("vidscale: group 0: no quorum or collective within --timeout 2 s")
    assert not any(line.startswith("vidscale: error:") for line in lines)
    # torchrun's own status is 1 whatever its worker's; the worker's is in its summary.
    assert f"exitcode  : {QUORUM_TIMEOUT_EXIT_CODE} (pid" in "\n".join(lines)
