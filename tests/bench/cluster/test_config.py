"""`bench cluster`'s config: which one-node step the stand-ins wait (`standin_compute`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from vidscale.bench.cluster.config import ClusterConfig
from vidscale.bench.cluster.rank import RankSpec
from vidscale.errors import InputError

ROOT = Path(__file__).resolve().parents[3]
NETWORK = ROOT / "docs" / "results" / "network_scaling_idle.json"


def with_co_running(
    tmp_path: Path, steps: dict[str, float], lockstep: dict[str, float] | None = None
) -> Path:
    """The recorded baseline with a co-running step (and a lockstep compute) per model added."""
    found = json.loads(NETWORK.read_text())
    path = tmp_path / "network.json"
    path.write_text(
        json.dumps({**found, "co_running_step_s": steps, "lockstep_step_s": lockstep or {}})
    )
    return path


def test_the_stand_ins_wait_the_step_asked_for(tmp_path: Path) -> None:
    models = ("tsm_resnet50", "i3d_resnet50_3x3x3")
    baseline = with_co_running(
        tmp_path,
        {"tsm_resnet50": 1.3, "i3d_resnet50_3x3x3": 0.95},
        {"tsm_resnet50": 1.4, "i3d_resnet50_3x3x3": 0.99},
    )
    alone = ClusterConfig(models=models, baseline=baseline)
    alone.check()
    found = alone.read_baseline()
    assert alone.waited_steps(found) == {m: found["one_process_step_s"][m] for m in models}
    beside = ClusterConfig(models=models, baseline=baseline, standin_compute="co_running")
    beside.check()
    assert beside.waited_steps(found) == {"tsm_resnet50": 1.3, "i3d_resnet50_3x3x3": 0.95}
    in_step = ClusterConfig(models=models, baseline=baseline, standin_compute="lockstep")
    in_step.check()
    assert in_step.waited_steps(found) == {"tsm_resnet50": 1.4, "i3d_resnet50_3x3x3": 0.99}


def test_a_baseline_without_the_co_running_step_is_refused_naming_the_flag(
    tmp_path: Path,
) -> None:
    baseline = with_co_running(tmp_path, {"tsm_resnet50": 1.3})
    cfg = ClusterConfig(
        models=("tsm_resnet50", "i3d_resnet50_3x3x3"),
        baseline=baseline,
        standin_compute="co_running",
    )
    with pytest.raises(InputError, match="--standin-compute: .* no co_running step of i3d"):
        cfg.check()
    in_step = ClusterConfig(models=("tsm_resnet50",), baseline=baseline, standin_compute="lockstep")
    with pytest.raises(InputError, match="no lockstep step of tsm_resnet50 .* lockstep_step_s"):
        in_step.check()


RECORDED = ROOT / "docs" / "results" / "network_scaling_lockstep_12steps.json"


def test_in_pass_compute_is_each_rates_real_aavg_rows_that_average_once_an_epoch() -> None:
    models = ("tsm_resnet50", "i3d_resnet50_3x3x3")
    cfg = ClusterConfig(
        models=models, rates=("500mbit", "2gbit"), baseline=RECORDED, standin_compute="in_pass"
    )
    cfg.check()
    found = cfg.read_baseline()
    assert found["settings"]["epoch_k"] == 16
    for rate in ("500mbit", "2gbit"):
        once = {
            r["model"]: r["compute_s"]
            for r in found["rows"]
            if (r["rate"], r["variant"]) == (rate, "aavg k=16")
        }
        assert cfg.waited_steps(found, rate) == once and set(once) == set(models)
    assert cfg.waited_steps(found) == cfg.waited_steps(found, "500mbit")  # the first rate's
    elsewhere = ClusterConfig(models=models, rates=("1gbit",), baseline=RECORDED)
    with pytest.raises(InputError, match="--standin-compute: .* at 1gbit"):
        replace(elsewhere, standin_compute="in_pass").check()


def test_an_aavg_row_measures_whole_averaging_periods() -> None:
    """A step's mean holds an averaging's share as often as training does: 1/k of the steps."""
    spec = RankSpec(
        models=("tsm_resnet50",),
        profiles={},
        variants=(),
        steps=12,
        warmup=2,
        batch=2,
        frames=4,
        size=112,
        num_classes=400,
        bucket_cap_mb=25.0,
    )
    assert spec.measured_steps(("ddp", "none", 0)) == 12
    assert spec.measured_steps(("aavg", "none", 4)) == 12
    assert spec.measured_steps(("aavg", "none", 16)) == 16  # at least one averaging
    assert replace(spec, steps=20).measured_steps(("aavg", "none", 16)) == 32
    assert replace(spec, steps=6).measured_steps(("aavg", "none", 4)) == 8
