"""`vidscale study multilabel`: its runs, what it refuses, and the report from finished runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vidscale.config import ConfigError
from vidscale.data.synthetic.multilabel import write_multilabel_dataset
from vidscale.run.metrics import MetricsLog
from vidscale.run.summary import summary_path
from vidscale.studies.multilabel import (
    RECIPES,
    MultiLabelStudySpec,
    design_multilabel_study,
    multilabel_study,
    train_command,
)
from vidscale.train.records.summary import RunCounters


@pytest.fixture(scope="module")
def ml_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ml_demo")
    write_multilabel_dataset(root, seed=1, train_videos=4, val_videos=2, size=32, num_frames=8)
    return root


def test_two_runs_of_the_multi_label_recipes(ml_demo: Path, tmp_path: Path) -> None:
    spec = MultiLabelStudySpec(data=ml_demo, out=tmp_path, epochs=3, overrides=("data.workers=0",))
    runs = design_multilabel_study(spec)
    assert [r.name for r in runs] == ["tsm", "tsn"]
    assert [r.cfg.recipe for r in runs] == list(RECIPES.values())
    assert all(r.cfg.data.multi_label and r.cfg.train.epochs == 3 for r in runs)
    assert all(r.cfg.model.num_classes == 6 for r in runs)
    cmd = train_command("tsn", spec)
    assert cmd[:6] == ["torchrun", "--standalone", "--nproc_per_node", "2", "-m", "vidscale"]
    assert "demo_tsn_r18_multilabel_8f_b32_e10" in cmd


@pytest.mark.parametrize(
    ("overrides", "epochs", "message"),
    [
        (("model.name=tsm_resnet50",), None, "the study sets this field"),
        (("data.multi_label=false",), None, "the study sets this field"),
        (("train.epochs=2",), 3, "not both"),
    ],
)
def test_refuses_what_would_change_the_comparison(
    ml_demo: Path, tmp_path: Path, overrides: tuple[str, ...], epochs: int | None, message: str
) -> None:
    spec = MultiLabelStudySpec(data=ml_demo, out=tmp_path, overrides=overrides, epochs=epochs)
    with pytest.raises(ConfigError, match=message):
        design_multilabel_study(spec)


def fake_run(run_dir: Path, *, model: str, maps: list[float], chance: float) -> None:
    run_dir.mkdir(parents=True)
    log = MetricsLog(run_dir, enabled=True)
    for epoch, value in enumerate(maps, 1):
        log.write("epoch", step=epoch * 10, epoch=epoch, epoch_seconds=5.0, val_map=value)
    log.close()
    counters = RunCounters(steps=30, wall_seconds=600.0, val_videos=192)
    for value in maps:
        counters.add_val(40.0, mean_ap=value, chance=chance)
    summary = RunCounters.merge([counters.as_dict()]).summary(
        model=model,
        world_size=2,
        global_batch=32,
        epochs=len(maps),
        num_classes=6,
        extra={"recipe": RECIPES[run_dir.name]},
    )
    summary.write(summary_path(run_dir))


def test_report_sets_each_run_against_chance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    fake_run(out / "tsm", model="tsm_resnet18", maps=[0.5, 0.93, 0.91], chance=0.31)
    fake_run(out / "tsn", model="tsn_resnet18", maps=[0.3, 0.33, 0.32], chance=0.31)
    spec = MultiLabelStudySpec(data=tmp_path / "unused", out=out)
    report = multilabel_study(spec, plot_only=True)
    tsm, tsn = report["runs"]
    assert (tsm["val_map"], tsm["best_val_map"]) == (0.91, 0.93)
    assert tsm["over_chance"] == pytest.approx(0.60)
    assert tsn["val_map_history"] == [0.3, 0.33, 0.32]
    assert tsn["eval_epochs"] == [1, 2, 3]
    assert (out / "study.png").is_file()
    assert json.loads((out / "study.json").read_text())["runs"][0]["run"] == "tsm"
    table = capsys.readouterr().out
    assert "tsm   tsm_resnet18     0.910  0.930  0.310 +0.600" in table


def test_plot_only_names_the_unfinished_runs(tmp_path: Path) -> None:
    spec = MultiLabelStudySpec(data=tmp_path, out=tmp_path / "empty")
    with pytest.raises(ConfigError, match="unfinished runs"):
        multilabel_study(spec, plot_only=True)
