"""A study's runs: skip the finished, resume the partial, refuse another config, launch under
torchrun (the runs are the batch-size sweep's)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vidscale.config import ConfigError, save_config, to_dict
from vidscale.studies import runs as study_runs
from vidscale.studies.runs import StudyRun
from vidscale.studies.sweep import SweepSpec, design_sweep

RECIPE = "demo_tsm_r18_8f_b32_e12"


def spec(out: Path, **kw) -> SweepSpec:
    kw.setdefault("overrides", ("data.root=/nowhere",))
    return SweepSpec(recipe=RECIPE, out=out, **kw)


# -- skip / resume ------------------------------------------------------------------------------
def test_execute_skips_done_resumes_partial_and_cleans_fresh(tmp_path: Path) -> None:
    runs = design_sweep(spec(tmp_path, optimizers=("sgd",)))
    done, partial, fresh = (r.run_dir for r in runs)
    for run in runs:
        run.run_dir.mkdir(parents=True)
        save_config(run.cfg, run.run_dir / "config.json")
    (done / "summary.json").write_text("{}")
    (partial / "checkpoints").mkdir()
    (partial / "checkpoints" / "last.pt").write_bytes(b"")
    (partial / "metrics.jsonl").write_text('{"kind": "epoch"}\n')
    (fresh / "metrics.jsonl").write_text('{"kind": "stale"}\n')
    calls: list[tuple[str, bool]] = []

    def launcher(run: StudyRun, resume: bool) -> None:
        calls.append((run.name, resume))

    trained = study_runs.execute(runs, launcher)
    assert calls == [("sgd_b128", True), ("sgd_b768", False)]
    assert trained == ["sgd_b128", "sgd_b768"]
    assert (partial / "metrics.jsonl").exists()  # resume keeps (and trims) its own log
    assert not (fresh / "metrics.jsonl").exists()
    assert [study_runs.run_state(d) for d in (done, partial, fresh)] == ["done", "resume", "fresh"]


def test_execute_refuses_a_run_made_with_another_config(tmp_path: Path) -> None:
    first = design_sweep(spec(tmp_path, optimizers=("lamb",), batches=(32,), epochs=3))[0]
    first.run_dir.mkdir(parents=True)
    save_config(first.cfg, first.run_dir / "config.json")
    again = design_sweep(spec(tmp_path, optimizers=("lamb",), batches=(32,), epochs=3))
    study_runs.execute(again, lambda run, resume: None)  # same config: accepted
    longer = design_sweep(spec(tmp_path, optimizers=("lamb",), batches=(32,), epochs=4))
    with pytest.raises(ConfigError, match=r"train\.epochs"):
        study_runs.execute(longer, lambda run, resume: None)


def test_torchrun_launcher_passes_every_override_and_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = design_sweep(spec(tmp_path, optimizers=("lars",), batches=(128,), nproc=2))[0]
    seen: list[list[str]] = []

    def record(cmd: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(study_runs.subprocess, "run", record)
    study_runs.torchrun_launcher(2)(run, True)
    cmd = seen[0]
    assert cmd[cmd.index("--nproc_per_node") + 1] == "2" and "--resume" in cmd
    sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
    assert sets == list(run.overrides) and "optim.simulate_world_size=8" in sets
    monkeypatch.setattr(
        study_runs.subprocess, "run", lambda cmd, check: subprocess.CompletedProcess(cmd, 1)
    )
    with pytest.raises(RuntimeError, match="lars_b128"):
        study_runs.torchrun_launcher(2)(run, False)


def test_config_differences_ignores_only_path_and_class_count() -> None:
    saved = {"data": {"root": "/a", "batch_size": 16}, "model": {"num_classes": 8, "name": "x"}}
    planned = {"data": {"root": "/b", "batch_size": 16}, "model": {"num_classes": 0, "name": "y"}}
    assert study_runs.config_differences(saved, planned) == ["model.name"]


def test_a_run_saved_before_a_config_field_existed_still_matches(tmp_path: Path) -> None:
    """A field added to the config since a run was saved takes its default when the saved
    config is read, so the run is recognised (and a real difference still is not)."""
    run = design_sweep(spec(tmp_path, batches=(32,), optimizers=("sgd",)))[0]
    run.run_dir.mkdir(parents=True)
    saved = json.loads(json.dumps(to_dict(run.cfg)))
    del saved["data"]["train_clip"]["modality"]  # as written before the field existed
    (run.run_dir / "config.json").write_text(json.dumps(saved))
    study_runs.check_existing(run)
    saved["data"]["batch_size"] += 1
    (run.run_dir / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match="data.batch_size"):
        study_runs.check_existing(run)
