"""`vidscale schedule`: the K400 multigrid recipe prints and writes PySlowFast's own table."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidscale.cli import main

FIXTURE = Path(__file__).resolve().parents[2].parent / "shared/fixtures/multigrid_k400_schedule.csv"


def test_the_k400_recipe_writes_the_fixture_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k400.csv"
    assert main(["schedule", "slowfast_r50_k400_8x8_multigrid_b64_e239", "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3.42x fewer iterations, 3.43x fewer FLOPs" in text
    assert "long cycle only 2.19x, short cycle only 1.56x" in text
    assert "358 epochs" in text
    if not FIXTURE.is_file():
        pytest.skip(f"{FIXTURE} is not here")
    expected = [line for line in FIXTURE.read_text().splitlines() if not line.startswith("#")]
    assert out.read_text().splitlines() == expected


def test_a_plain_recipe_is_one_phase_and_bad_fields_are_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["schedule", "demo_tsm_r18_8f_b32_e12", "--world-size", "2", "--dataset-size", "768"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "12 epochs, 288 steps" in text and "saving" not in text
    assert main([*args, "--set", "multigrid.eval_freq=0"]) == 2
    assert "multigrid: eval_freq must be >= 1" in capsys.readouterr().err
    assert main(["schedule", "no_such_recipe"]) == 2
    assert "unknown recipe 'no_such_recipe'" in capsys.readouterr().err
