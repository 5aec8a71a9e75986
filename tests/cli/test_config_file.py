"""`vidscale train --config FILE`: a run started from a JSON config, and that file's errors.

The file is a finished run's `RUN/config.json` or what `vidscale recipes NAME --json` prints;
`--data` and `--set` apply on top of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.cli import build_parser, main, resolve_config
from vidscale.config import load_config, resolve, to_dict
from vidscale.recipes import get_recipe
from vidscale.run.metrics import read_metrics

RECIPE = "demo_tsm_r18_8f_b32_e12"
JITTERED = "slowfast_r50_charades_16x8_multigrid_b128_e57"  # a short-side jitter crop


def recipe_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], recipe: str = RECIPE) -> Path:
    """`vidscale recipes RECIPE --json > my.json`."""
    assert main(["recipes", recipe, "--json"]) == 0
    path = tmp_path / "my.json"
    path.write_text(capsys.readouterr().out)
    return path


def resolved(*argv: str) -> object:
    return resolve_config(build_parser().parse_args(["train", *argv, "--out", "unused"]))


@pytest.mark.parametrize("recipe", [RECIPE, JITTERED])
def test_recipes_json_to_config_round_trip_is_the_recipe(
    recipe: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = recipe_file(tmp_path, capsys, recipe)
    assert json.loads(path.read_text()) == json.loads(json.dumps(to_dict(get_recipe(recipe))))
    assert resolved("--config", str(path)) == resolved("--recipe", recipe)
    # --data and --set apply on top of the file, as on top of a recipe.
    on_top = ("--data", "somewhere", "--set", "data.batch_size=3", "--set", "train.epochs=2")
    assert resolved("--config", str(path), *on_top) == resolved("--recipe", recipe, *on_top)
    assert resolved("--config", str(path), *on_top) == resolve(
        get_recipe(recipe), ["data.root=somewhere", "data.batch_size=3", "train.epochs=2"]
    )


def test_a_filter_still_lists_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "demo_tsm", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and RECIPE in [r["recipe"] for r in rows]


def losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


@pytest.mark.slow
def test_a_run_from_a_finished_runs_config_is_the_same_run(tiny_demo: Path, tmp_path: Path) -> None:
    first, again = tmp_path / "first", tmp_path / "again"
    sets = [*tiny_overrides(tiny_demo), "train.epochs=2", "train.amp=off"]
    sets += ["train.channels_last=off"]
    argv = ["train", "--recipe", RECIPE, "--out", str(first)]
    assert main([*argv, *(f"--set={s}" for s in sets)]) == 0
    config = first / "config.json"
    assert main(["train", "--config", str(config), "--out", str(again)]) == 0
    assert len(losses(first)) == 4 and losses(again) == losses(first)
    assert load_config(again / "config.json") == load_config(config)


def bad_files() -> list[tuple[str, str, str]]:
    """(file text, what the one line must say after the file name)."""
    return [
        ("not json {", "not JSON", "not-json"),
        ("[1, 2]", "expected a JSON object", "a-list"),
        ('{"data": {"batch_sise": 3}}', "data.batch_sise: unknown field", "unknown-field"),
        ('{"data": {"batch_size": "x"}}', "data.batch_size: expected an integer", "wrong-type"),
        ('{"data": {"batch_size": 0}}', "data.batch_size must be >= 1", "bad-value"),
        ('{"train": {"amp": "fp8"}}', "train.amp: 'fp8' is not one of", "bad-choice"),
        ('{"optim": 3}', "optim: expected a mapping", "section-not-mapping"),
    ]


@pytest.mark.parametrize(
    ("text", "said"), [c[:2] for c in bad_files()], ids=[c[2] for c in bad_files()]
)
def test_a_bad_file_is_one_line_naming_the_file_and_field(
    text: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "my.json"
    path.write_text(text)
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "run")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"vidscale: error: {path}: {said}"), lines[0]
    assert not (tmp_path / "run").exists()


def test_config_with_recipe_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = recipe_file(tmp_path, capsys)
    argv = ["train", "--config", str(path), "--recipe", RECIPE, "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == "vidscale: error: --config and --recipe: give one of them, not both\n"
