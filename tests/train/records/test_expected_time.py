"""The run's expected time before the first step, from the fast-path probe's step time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.cli import main
from vidscale.fastpath.probe import FastPathDecision
from vidscale.train.records.expected_time import duration, expected_training_time


def probed(label_seconds: dict[str, float], chosen: tuple[bool, bool]) -> FastPathDecision:
    measured = {
        label: {"seconds": s, "speedup": 1.0, "noise": 0.0, "faster_rounds": 0}
        for label, s in label_seconds.items()
    }
    return FastPathDecision(*chosen, "probe", measured=measured)


def test_the_steps_left_times_the_chosen_settings_probe_time() -> None:
    decision = probed({"fp32": 0.4, "fp32+cl": 0.3}, chosen=(False, True))
    line = expected_training_time(decision, steps=480, accumulate=1)
    assert line is not None
    assert line.startswith("expected: at least 2.4 min for the 480 steps")  # 480 x 0.3 s
    assert "(0.3 s each" in line and "fp32+cl" in line
    accumulated = expected_training_time(decision, steps=10, accumulate=4)
    assert accumulated is not None and "at least 12 s" in accumulated
    assert "10 steps of 4 micro-batches" in accumulated


def test_nothing_is_said_without_a_timing_or_steps() -> None:
    explicit = FastPathDecision(False, False, "explicit", reason="train.amp=off")
    assert expected_training_time(explicit, steps=480, accumulate=1) is None
    done = probed({"fp32": 0.4}, chosen=(False, False))
    assert expected_training_time(done, steps=0, accumulate=1) is None


def test_durations_read_as_a_person_would() -> None:
    assert [duration(s) for s in (0.37, 45, 252, 9000)] == ["0.4 s", "45 s", "4.2 min", "2.5 h"]


@pytest.mark.slow
def test_a_run_says_its_expected_time_and_the_time_left(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real one-process run: the probe decides, the run prints the estimate from it before
    the first step, and every epoch but the last the time left at its pace."""
    sets = [*tiny_overrides(tiny_demo), "train.epochs=2", "train.fast_path_cache=off"]
    args = ["train", "--recipe", "demo_tsm_r18_8f_b32_e12", "--out", str(tmp_path / "run")]
    assert main([*args, *(a for s in sets for a in ("--set", s))]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = [line for line in lines if line.startswith("vidscale: expected: at least")]
    assert len(expected) == 1 and " s each, the probe's" in expected[0], lines
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 2 and epochs[0].endswith(" left") and not epochs[1].endswith(" left")
