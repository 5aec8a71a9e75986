"""`vidscale recipes --world-size N`: a recipe that cannot run on N processes is listed with
the reason, and the others are still listed (the listing never stops at one of them)."""

from __future__ import annotations

import json

import pytest

from vidscale.cli import main


def test_a_recipe_that_cannot_run_on_n_processes_is_named_with_its_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["recipes", "tsm_r50_k400_8f_b", "--world-size", "8", "--json"]) == 0
    rows = {r["recipe"]: r for r in json.loads(capsys.readouterr().out)}
    assert "simulate_world_size=6" in rows["tsm_r50_k400_8f_b96_e100"]["error"]
    assert rows["tsm_r50_k400_8f_b768_e100"]["accumulate"] == 12  # 96 GPUs on 8 processes
    assert main(["recipes", "tsm_r50_k400_8f_b", "--world-size", "8"]) == 0
    text = capsys.readouterr().out
    assert "tsm_r50_k400_8f_b96_e100" in text and "(not on 8 processes:" in text
