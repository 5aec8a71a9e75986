"""The Table 3 recipes resolve to the paper's global batch and linearly scaled LR."""

from typing import cast

import pytest

from vidscale.cli import main
from vidscale.recipes import get_recipe
from vidscale.recipes.kinetics import TABLE3_GPUS
from vidscale.run.timeline import recipe_row

K400 = 240_000


@pytest.mark.parametrize("gpus", TABLE3_GPUS)
def test_table3_row_batch_and_lr(gpus: int) -> None:
    name = f"tsm_r50_k400_8f_b{8 * gpus}_e100"
    row = recipe_row(name, get_recipe(name), world_size=1, train_size=K400)
    assert row["global_batch"] == 8 * gpus
    assert row["lr"] == pytest.approx(0.00125 * gpus)
    assert row["steps_per_epoch"] == K400 // (8 * gpus)
    assert row["warmup_steps"] == 5 * row["steps_per_epoch"]


def test_simulated_cluster_keeps_the_global_batch_on_fewer_processes() -> None:
    cfg = get_recipe("tsm_r50_k400_8f_b12288_e100")
    for world in (1, 8, 64, 1536):
        row = recipe_row("x", cfg, world_size=world, train_size=K400)
        assert row["global_batch"] == 12_288
        assert cast(int, row["accumulate"]) * world == 1536
        assert row["lr"] == pytest.approx(1.92)


def test_baseline_recipe_is_6_gpus_by_16() -> None:
    row = recipe_row("b", get_recipe("tsm_r50_k400_8f_b96_e100"), world_size=6, train_size=K400)
    assert (row["global_batch"], row["accumulate"], row["epochs"]) == (96, 1, 100)
    assert row["lr"] == pytest.approx(0.015)


def test_recipes_command_prints_table3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "k400", "--world-size", "8"]) == 0
    out = capsys.readouterr().out  # 6 GPUs do not divide into 8: that row says so, others list
    assert "tsm_r50_k400_8f_b96_e100" in out and "(not on 8 processes:" in out
    assert main(["recipes", "k400_8f_b12288"]) == 0
    out = capsys.readouterr().out
    assert "tsm_r50_k400_8f_b12288_e100" in out and "12,288" in out and "1.92" in out
