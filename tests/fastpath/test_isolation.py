"""The fast-path probe in a child process: real children that hang, crash or raise in one
setting; the setting is left out, the probe completes, and a killed run leaves no child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.distributed.multiproc import run_ranks
from tests.fastpath.test_probe import SHAPE, TinyClipNet
from vidscale.distributed.env import DistEnv
from vidscale.fastpath import isolation as isolation
from vidscale.fastpath.isolation import (
    HangLimits,
    ProbeFailed,
    probe_isolated,
    start_holding_sigint,
)
from vidscale.fastpath.probe import ProbeSettings, decide
from vidscale.fastpath.settings import Candidate

CPU = torch.device("cpu")
# Every candidate in every round (3 rounds alone could not leave fp32: all else would stop).
QUICK = ProbeSettings(warmup=1, repeats=3, settle=0, drop_hopeless=False)
FP32, FP32_CL = Candidate(False, False), Candidate(False, True)
# A turn of the tiny model takes milliseconds: a few seconds mark a hang without waiting long.
SHORT = HangLimits(start_s=120, first_turn_s=60, factor=10, floor_s=3)
PID_FILE = "VIDSCALE_TEST_PROBE_PID_FILE"


def _channels_last(net: TinyClipNet) -> bool:
    return net.conv.weight.is_contiguous(memory_format=torch.channels_last_3d)


class HangsInChannelsLast(TinyClipNet):
    """Spins forever in channels-last (as oneDNN's bf16 backward-weights kernel did for I3D);
    writes its process id where `PID_FILE` says, if set."""

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        if _channels_last(self):
            if PID_FILE in os.environ:
                Path(os.environ[PID_FILE]).write_text(str(os.getpid()))
            while True:
                time.sleep(0.1)
        return super().forward(clips)


class AbortsInChannelsLast(TinyClipNet):
    """Kills its process with SIGABRT in channels-last (as SlowFast's bf16 lateral conv did)."""

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        if _channels_last(self):
            os.abort()
        return super().forward(clips)


class RaisesInChannelsLast(TinyClipNet):
    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        if _channels_last(self):
            raise RuntimeError("no kernel for this layout")
        return super().forward(clips)


class AlwaysRaises(TinyClipNet):
    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("input too small")


def isolated(build: Any, to_time: list[Candidate] | None = None) -> Any:
    return probe_isolated(
        build, to_time or [FP32, FP32_CL], device=CPU, shape=SHAPE, settings=QUICK, limits=SHORT
    )


@pytest.mark.slow
def test_a_child_times_every_candidate_as_the_in_process_probe_does() -> None:
    result = isolated(TinyClipNet)
    assert list(result.samples) == ["fp32", "fp32+cl"] and result.failed == {}
    assert all(len(s) == QUICK.repeats and min(s) > 0 for s in result.samples.values())


@pytest.mark.slow
def test_a_long_probe_says_how_far_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "PROGRESS_EVERY_S", 0.0)  # every turn, here
    lines: list[str] = []
    probe_isolated(
        TinyClipNet, [FP32, FP32_CL], device=CPU, shape=SHAPE, settings=QUICK, progress=lines.append
    )
    turns = 2 * (1 + QUICK.warmup + QUICK.repeats)  # a gradient check, then the rounds
    first = f"fast path: probe turn 1 of at most {turns} (fp32), "
    assert len(lines) == turns and lines[0].startswith(first)
    assert lines[-1].startswith(f"fast path: probe turn {turns} of at most {turns} (")


@pytest.mark.slow
def test_a_setting_that_hangs_is_left_out_and_the_probe_completes() -> None:
    started = time.monotonic()
    result = isolated(HangsInChannelsLast)
    assert list(result.samples) == ["fp32"] and len(result.samples["fp32"]) == QUICK.repeats
    assert result.failed["fp32+cl"].startswith("hung: its turn did not end in 3 s")
    assert time.monotonic() - started < 60  # the floor, not the first turn's 60 s


@pytest.mark.slow
def test_a_setting_that_crashes_the_child_is_left_out() -> None:
    result = isolated(AbortsInChannelsLast)
    assert list(result.samples) == ["fp32"]
    assert result.failed == {"fp32+cl": "crashed: killed by SIGABRT"}


@pytest.mark.slow
def test_a_setting_that_raises_is_left_out_with_its_error() -> None:
    result = isolated(RaisesInChannelsLast)
    assert list(result.samples) == ["fp32"]
    assert result.failed == {"fp32+cl": "raised RuntimeError: no kernel for this layout"}


@pytest.mark.slow
def test_the_reference_failing_is_an_error_naming_it() -> None:
    with pytest.raises(ProbeFailed, match=r"failed at fp32 \(raised RuntimeError: input too small"):
        isolated(AlwaysRaises)


@pytest.mark.slow
def test_a_killed_run_leaves_no_probe_behind(tmp_path: Path) -> None:
    """The run is SIGKILLed while its probe's child spins: the kernel ends the child too."""
    pid_file = tmp_path / "child.pid"
    script = textwrap.dedent(
        """
        import torch
        from tests.fastpath.test_isolation import HangsInChannelsLast, isolated
        isolated(HangsInChannelsLast)
        """
    )
    env = os.environ | {PID_FILE: str(pid_file)}
    run = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=Path.cwd())
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pid_file.exists(), "the probe's child never reached the hanging setting"
        child = int(pid_file.read_text())
        assert _running(child)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(child)


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def decide_hanging(env: DistEnv, cache: str) -> dict[str, Any]:
    return decide(
        env.device,
        enabled=True,
        amp="off",
        channels_last="auto",
        build=HangsInChannelsLast,
        shape=SHAPE,
        key_fields={"model": "hangs-in-cl", "processes": env.local_world_size},
        cache=Path(cache),
        checkpoint=None,
        is_main=env.is_main,
        settings=QUICK,
        limits=SHORT,
    ).record()


@pytest.mark.slow
def test_two_ranks_leave_out_what_hung_and_agree(tmp_path: Path) -> None:
    r0, r1 = run_ranks(decide_hanging, 2, str(tmp_path / "cache.json"), timeout=180)
    assert r0 == r1 and (r0["bf16"], r0["channels_last"]) == (False, False)
    assert r0["source"] == "probe" and list(r0["samples"]) == ["fp32"]
    assert r0["rounds"] == 2 * QUICK.repeats and r0["failed"]["fp32+cl"].startswith("hung")
    again = run_ranks(decide_hanging, 2, str(tmp_path / "cache.json"), timeout=60)
    assert again[0]["source"] == "cache" and again[0]["failed"] == r0["failed"]


class _SlowStart:
    """A child whose start is interrupted halfway: SIGINT arrives inside `start()`."""

    def __init__(self) -> None:
        self.started = False

    def start(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # an unheld SIGINT raises here, the handover half done
        self.started = True


def test_a_ctrl_c_during_the_childs_start_arrives_once_it_has_started() -> None:
    # Python's own handler, whatever this process inherited: a shell starts a background job
    # with SIGINT ignored, and Python then installs none.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        child = _SlowStart()
        with pytest.raises(KeyboardInterrupt):
            start_holding_sigint(child)
        assert child.started
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)
