"""`vidscale eval` on checkpoints that do not load: a file cut short (disk damage), a pickle
that `torch.load(weights_only=True)` refuses (a crafted file) and one whose record
(`run.record`) holds a key of the wrong type. One checkpoint asked for: one
line naming it, status 2. Several (`--last N`): the damaged ones left out of the mean and
listed in the report (JSON and the lines for a person); none loading: one line naming each.

The run is made here on the shared tiny demo data: its saved config and three epoch
checkpoints of one model's weights, so every intact checkpoint scores the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.tiny_run import tiny_overrides
from vidscale.cli import main
from vidscale.config import apply_overrides, save_config
from vidscale.models.registry import build_model
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import save_checkpoint
from vidscale.run.data import load_data

EPOCHS = ("epoch_0001.pt", "epoch_0002.pt", "epoch_0003.pt")


class Crafted:
    """A class no checkpoint holds: `weights_only` refuses to build it."""


def make_run(root: Path, data: Path) -> Path:
    cfg = apply_overrides(get_recipe("demo_tsm_r18_8f_b32_e12"), tiny_overrides(data))
    cfg, _ = load_data(cfg)  # the class count, which the model needs
    run = root / "run"
    run.mkdir()
    save_config(cfg, run / "config.json")
    torch.manual_seed(0)
    state = {"model": build_model(cfg.model).state_dict()}
    for name in EPOCHS:
        save_checkpoint(state, run / "checkpoints" / name)
    return run


def damage(path: Path, kind: str) -> None:
    if kind == "truncated":  # the first half of the file, as a full disk leaves it
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "record":  # it loads, but its record says its model has "five" classes
        save_checkpoint({**torch.load(path, weights_only=True), "num_classes": "five"}, path)
    else:  # a real torch file whose pickle names a class outside the allowlist
        torch.save({"model": Crafted()}, path)


def eval_cli(run: Path, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["eval", str(run), *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["truncated", "refused", "record"])
def test_eval_names_a_damaged_checkpoint_or_leaves_it_out(
    kind: str, tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path, tiny_demo)
    ckpts = run / "checkpoints"
    code, out, _ = eval_cli(run, "--last", "3", "--json", capsys=capsys)
    assert code == 0
    intact = json.loads(out)
    assert [row["checkpoint"] for row in intact["checkpoints"]] == list(EPOCHS)
    assert intact["damaged"] == []

    damage(ckpts / EPOCHS[2], kind)
    code, out, err = eval_cli(run, capsys=capsys)  # the newest checkpoint alone
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and not out, err
    assert lines[0].startswith("vidscale: error: ")
    assert f"{ckpts / EPOCHS[2]}: not a readable checkpoint" in lines[0]
    assert ("record key 'num_classes': str, not int" in lines[0]) is (kind == "record")

    damage(ckpts / EPOCHS[1], kind)
    code, out, _ = eval_cli(run, "--last", "3", "--json", capsys=capsys)
    assert code == 0
    report = json.loads(out)
    assert [row["checkpoint"] for row in report["checkpoints"]] == [EPOCHS[0]]
    assert [d["path"] for d in report["damaged"]] == [str(ckpts / n) for n in EPOCHS[1:]]
    assert all(d["reason"] for d in report["damaged"])
    assert report["top1_mean"] == intact["top1_mean"]  # the same weights, still scored
    code, out, _ = eval_cli(run, "--last", "3", capsys=capsys)  # for a person
    assert code == 0
    for name in EPOCHS[1:]:
        assert f"damaged checkpoint, left out: {ckpts / name}: " in out

    code, out, err = eval_cli(run, "--last", "2", capsys=capsys)  # none of them loads
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and not out, err
    assert "none of the 2 checkpoints loads" in lines[0]
    assert all(str(ckpts / name) in lines[0] for name in EPOCHS[1:])
