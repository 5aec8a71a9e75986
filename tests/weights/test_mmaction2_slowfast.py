"""`--format mmaction2` for SlowFast without the peer environment: the refusals and errors, and
an imported run at work. The logits proofs against MMAction2 are `test_mmaction2.py`'s and
`test_export_mmaction2.py`'s, which cover every model of `mmaction2.SOURCES`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.weights.at_work import check_at_work, import_run
from tests.weights.test_mmaction2 import run_cli, write_mmaction2_checkpoint
from vidscale.errors import InputError
from vidscale.models.registry import ModelConfig, build_model
from vidscale.weights.mmaction2 import check_model, key_table

FOUR = "slowfast_resnet50_4x16_mmaction2"
EIGHT = "slowfast_resnet50_8x8_mmaction2"


def test_pyslowfasts_layout_is_refused_naming_the_twin() -> None:
    with pytest.raises(
        InputError, match="laterals have BN and ReLU.*slowfast_resnet50_8x8_mmaction2"
    ):
        check_model("slowfast_resnet50_8x8")


@pytest.mark.slow
def test_the_laterals_and_pathways_are_mmaction2s_modules() -> None:
    with torch.device("meta"):
        table = key_table(build_model(ModelConfig(name=FOUR)).state_dict(), model=FOUR)
    laterals = {k: v for k, v in table.items() if "lateral" in k}
    assert laterals == {
        "backbone.slow_path.conv1_lateral.conv.weight": "lateral.0.conv.weight",
        "backbone.slow_path.layer1_lateral.conv.weight": "lateral.1.conv.weight",
        "backbone.slow_path.layer2_lateral.conv.weight": "lateral.2.conv.weight",
        "backbone.slow_path.layer3_lateral.conv.weight": "lateral.3.conv.weight",
    }
    assert (
        table["backbone.fast_path.layer1.0.downsample.bn.bias"] == "fast.layer1.0.downsample.1.bias"
    )
    assert table["backbone.slow_path.conv1.bn.weight"] == "slow.bn1.weight"
    assert table["cls_head.fc_cls.weight"] == "fc.weight"


@pytest.mark.slow
def test_a_4x16_checkpoint_is_not_an_8x8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lateral kernels differ (5 and 7): one line naming the first shapes."""
    src = write_mmaction2_checkpoint(tmp_path / "sf.pth", FOUR, 5)
    code, _, err = run_cli(
        capsys, "import-weights", str(src), "--format", "mmaction2", "--model", EIGHT,
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert f"not an MMAction2 {EIGHT} checkpoint: 4 of another shape (checkpoint vs model): " in err
    assert (
        "backbone.slow_path.conv1_lateral.conv.weight (16, 8, 5, 1, 1) vs (16, 8, 7, 1, 1)" in err
    )
    assert "(+1 more)" in err and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_pyslowfast_layout_checkpoint_names_the_lateral_bns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lateral BN's tensors (PySlowFast's layout saved under MMAction2's names) are unexpected."""
    src = write_mmaction2_checkpoint(tmp_path / "sf.pth", FOUR, 5)
    ckpt = torch.load(src, weights_only=True)
    ckpt["state_dict"]["backbone.slow_path.conv1_lateral.bn.weight"] = torch.ones(16)
    torch.save(ckpt, src)
    code, _, err = run_cli(
        capsys, "import-weights", str(src), "--format", "mmaction2", "--model", FOUR,
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert "1 unexpected: backbone.slow_path.conv1_lateral.bn.weight" in err


@pytest.mark.slow
def test_an_imported_slowfast_predicts_evaluates_exports_and_fine_tunes(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_mmaction2_checkpoint(tmp_path / "sf.pth", FOUR, 8)
    run = tmp_path / "run"
    classes = tiny_demo / "classes.txt"
    report = import_run(capsys, src, fmt="mmaction2", model=FOUR, classes=classes, run=run)
    assert report["tensors"] == 642 and report["eval_views"] == "10 clips x 3 crops of 32 frames"

    out = tmp_path / "back.pth"
    code, stdout, err = run_cli(
        capsys, "export", str(run), "--format", "mmaction2", "--out", str(out), "--json"
    )
    assert code == 0, err
    assert "642 tensors" in json.loads(stdout)["check"]
    saved = torch.load(out, weights_only=True)["state_dict"]
    given = torch.load(src, weights_only=True)["state_dict"]
    assert list(saved) == list(given) and all(torch.equal(saved[k], given[k]) for k in given)

    check_at_work(capsys, run, data=tiny_demo, tmp_path=tmp_path)
