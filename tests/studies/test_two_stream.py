"""`vidscale two-stream-study`: rgb, flow from scratch and flow from the rgb run (AAVG §V), each
as `vidscale train` makes it, trained once and reported with their late fusion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.tiny_run import is_share_of, tiny_overrides
from vidscale.cli import build_parser, main, resolve_config
from vidscale.config import ConfigError, to_dict
from vidscale.data.prepared.prepare import prepare_from_layout
from vidscale.run.data import load_splits, resolve_data
from vidscale.studies.two_stream import (
    RECIPES,
    TwoStreamStudySpec,
    add_epochs_to_target,
    design_two_stream_study,
    train_command,
)


@pytest.fixture(scope="module")
def prepared(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny demo as RGB shards plus DIS optical flow, at its own 32 px (not the default 256,
    so the runs record flow settings that differ from the config's defaults)."""
    out = tmp_path_factory.mktemp("prep")
    prepare_from_layout("generic", tiny_demo, out, flow="dis", short_side=32, workers=1)
    return out


def small() -> tuple[str, ...]:
    """The tiny training settings, without data.root (the study's --data)."""
    return tuple(s for s in tiny_overrides(Path()) if not s.startswith("data.root="))


def test_each_planned_run_is_what_its_train_command_saves(prepared: Path, tmp_path: Path) -> None:
    spec = TwoStreamStudySpec(prepared, tmp_path / "study", small(), epochs=3, nproc=2)
    runs = design_two_stream_study(spec)
    assert [r.name for r in runs] == ["rgb", "flow_scratch", "flow_from_rgb"]
    rgb, scratch, transfer = (r.cfg for r in runs)
    assert (rgb.data.source, rgb.data.train_clip.modality) == ("shards", "rgb")
    assert (scratch.data.source, scratch.data.train_clip.modality) == ("shards", "flow")
    assert scratch.model.init_from == ""
    assert transfer.model.init_from == str((tmp_path / "study" / "rgb").absolute())
    assert scratch.data.flow.short_side == 32  # recorded from PREP/flow, as training does
    assert {rgb.train.epochs, scratch.train.epochs, transfer.train.epochs} == {3}
    for run in runs:
        cmd = train_command(run.name, spec)
        assert cmd[:5] == ["torchrun", "--standalone", "--nproc_per_node", "2", "-m"]
        args = build_parser().parse_args(cmd[6:])
        assert args.recipe == RECIPES[run.name] and args.out == run.run_dir
        by_hand = resolve_config(args)
        by_hand = resolve_data(by_hand, load_splits(by_hand).classes)
        assert to_dict(by_hand) == to_dict(run.cfg)


def test_controlled_fields_and_a_prep_without_flow_are_refused(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match=r"--set model\.init_from"):
        design_two_stream_study(TwoStreamStudySpec(tmp_path, tmp_path, ("model.init_from=x",)))
    with pytest.raises(ConfigError, match="--epochs or --set train.epochs"):
        design_two_stream_study(TwoStreamStudySpec(tmp_path, tmp_path, ("train.epochs=2",), 1))
    out = tmp_path / "study"
    argv = ["study", "two-stream", "--data", str(tiny_demo), "--out", str(out), "--nproc", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tiny_demo) in err
    assert "no prepared optical flow" in err and "vidscale prepare" in err and "--flow dis" in err
    assert not out.exists()  # refused before anything trained


def test_epochs_to_target_counts_flow_runs_against_the_scratch_best() -> None:
    rows: list[dict[str, Any]] = [
        {"run": "rgb", "eval_epochs": [1, 2], "val_top1": [90.0, 95.0]},
        {"run": "flow_scratch", "eval_epochs": [1, 2, 3], "val_top1": [40.0, 79.5, 80.0]},
        {"run": "flow_from_rgb", "eval_epochs": [1, 2, 3], "val_top1": [79.0, 81.0, 70.0]},
    ]
    rows[1]["best_val_top1"] = 80.0
    assert add_epochs_to_target(rows, margin=1.0) == 79.0
    assert [r["epochs_to_target"] for r in rows] == [None, 2, 1]
    assert add_epochs_to_target(rows, margin=0.0) == 80.0
    assert [r["epochs_to_target"] for r in rows] == [None, 3, 2]


@pytest.mark.slow
def test_the_study_trains_once_fuses_and_reports(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    argv = ["study", "two-stream", "--data", str(prepared), "--out", str(out), "--nproc", "1"]
    argv += ["--epochs", "1", "--weights", "1,1.5"]
    for item in small():
        argv += ["--set", item]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.count(": training") == 3 and "initialised from" in text
    saved = {n: json.loads((out / n / "config.json").read_text()) for n in RECIPES}
    assert saved["flow_from_rgb"]["model"]["init_from"] == str((out / "rgb").absolute())
    assert saved["flow_scratch"]["model"]["init_from"] == ""
    assert saved["rgb"]["data"]["source"] == "shards"

    report = json.loads((out / "study.json").read_text())
    assert [r["run"] for r in report["runs"]] == list(RECIPES)
    for r in report["runs"]:
        assert r["eval_epochs"] == [1] and r["best_epoch"] == 1
        summary = json.loads((out / r["run"] / "summary.json").read_text())
        assert r["best_val_top1"] == summary["best_val_top1"]
        assert is_share_of(r["best_val_top1"], summary["val_videos"])
    assert report["weights"] == {"rgb": 1.0, "flow": 1.5}
    assert set(report["fusion"]) == {"flow_scratch", "flow_from_rgb"}
    for f in report["fusion"].values():
        assert all(is_share_of(f[k], 8) for k in ("top1", "top5", "rgb_top1", "flow_top1"))
        assert f["top1"] <= f["top5"]
        assert f["gain_over_best_stream"] == pytest.approx(
            f["top1"] - max(f["rgb_top1"], f["flow_top1"])
        )
        assert f["videos"] == 8 and f["checkpoints"]["rgb"].endswith("epoch_0001.pt")
    fused = {n: f["top1"] for n, f in report["fusion"].items()}
    assert report["transfer"]["epochs_to_best"] == {"flow_scratch": 1, "flow_from_rgb": 1}
    assert report["transfer"]["fused_top1_change"] == pytest.approx(
        fused["flow_from_rgb"] - fused["flow_scratch"]
    )
    assert "model.init_from=" in report["commands"]["flow_from_rgb"]
    assert (out / "study.png").stat().st_size > 0
    assert "fusion with rgb" in text and "flow_from_rgb" in text

    # Again: all three are finished and skipped; --plot-only rebuilds the same report.
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.count("done, skipped") == 3 and ": training" not in text
    assert main([*argv, "--plot-only"]) == 0
    assert json.loads((out / "study.json").read_text()) == report
