"""`vidscale study aavg`: the runs it plans, and its report from real (tiny) runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.config import ConfigError
from vidscale.studies.aavg import StudySpec, aavg_study, design_aavg_study


def test_the_study_plans_the_k_series_and_aavg1_to_3(tmp_path: Path) -> None:
    runs = design_aavg_study(StudySpec("demo_tsm_r18_8f_b32_e12", tmp_path, ks=(1, 4, -1)))
    names = [r.name for r in runs]
    assert names == ["k1", "k4", "k-1", "k-1_plain", "k-1_adaptive_plain", "k-1_adaptive"]
    by_name = {r.name: r.cfg for r in runs}
    assert by_name["k4"].aavg.k == 4 and by_name["k4"].dist.strategy == "aavg"
    assert by_name["k-1_plain"].aavg.merge_optimizer_state is False
    assert by_name["k-1_adaptive"].aavg.adaptive_batch and by_name["k-1_adaptive"].aavg.merge_bn
    for cfg in by_name.values():
        assert cfg.optim.name == "adamw" and cfg.lr.schedule == "constant"
        # Adam at 1e-3 on the recipe's global batch of 32 (2 learners x 16).
        assert cfg.optim.lr_per_8_clips * 32 / 8 == pytest.approx(1e-3)


def test_a_controlled_field_or_a_bad_k_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--set aavg\.k"):
        design_aavg_study(StudySpec("demo_tsm_r18_8f_b32_e12", tmp_path, overrides=("aavg.k=3",)))
    with pytest.raises(ConfigError, match="--aavg-k"):
        design_aavg_study(StudySpec("demo_tsm_r18_8f_b32_e12", tmp_path, ks=(0,)))


@pytest.mark.slow
def test_the_study_trains_skips_finished_runs_and_reports(tiny_demo: Path, tmp_path: Path) -> None:
    spec = StudySpec(
        "demo_tsm_r18_8f_b32_e12",
        tmp_path / "study",
        overrides=(*tiny_overrides(tiny_demo), "optim.simulate_world_size=0"),
        ks=(-1,),
        epochs=1,
        nproc=1,
    )
    rows = aavg_study(spec)
    assert [r["run"] for r in rows] == ["k-1", "k-1_plain", "k-1_adaptive_plain", "k-1_adaptive"]
    doc = json.loads((tmp_path / "study" / "study.json").read_text())
    assert len(doc["runs"]) == 4 and (tmp_path / "study" / "study.png").stat().st_size > 0
    for r in rows:
        assert r["epoch"] == [1] and r["val_top1"][0] is not None
        assert r["comm_bytes"] == 0  # one learner: nothing to average
    mtime = (tmp_path / "study" / "k-1" / "summary.json").stat().st_mtime
    again = aavg_study(spec)  # every run is done: nothing retrains
    assert (tmp_path / "study" / "k-1" / "summary.json").stat().st_mtime == mtime
    assert again == rows
    assert aavg_study(spec, plot_only=True) == rows
