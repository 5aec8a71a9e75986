"""The study skeleton calls a study's steps in order, and `--plot-only` trains nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidscale.studies import runs as study_runs
from vidscale.studies.runs import StudyRun
from vidscale.studies.skeleton import Study, run_study
from vidscale.studies.sweep import SweepSpec, design_sweep


class Recorded(Study[list[str]]):
    """The sweep's real runs, with every step noted."""

    label = "recorded"

    def __init__(self, out: Path) -> None:
        self.out, self.nproc = out, 1
        self.steps: list[str] = []
        self.spec = SweepSpec("demo_tsm_r18_8f_b32_e20", out, ("data.root=/x",), batches=(32,))

    def design(self) -> list[StudyRun]:
        self.steps.append("design")
        return design_sweep(self.spec)[:2]

    def check_fits(self, runs: list[StudyRun]) -> None:
        self.steps.append(f"check_fits {len(runs)}")

    def finished(self) -> list[Path]:
        self.steps.append("finished")
        return [self.out / "sgd_b32"]

    def report(self, run_dirs: list[Path]) -> list[str]:
        self.steps.append("report")
        return [d.name for d in run_dirs]


def test_steps_in_order_and_each_run_trained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trained: list[tuple[str, bool]] = []
    monkeypatch.setattr(
        study_runs, "train_in_process", lambda run, r: trained.append((run.name, r))
    )
    study = Recorded(tmp_path)
    assert run_study(study) == ["sgd_b32", "lars_b32"]
    assert study.steps == ["design", "check_fits 2", "report"]
    assert trained == [("sgd_b32", False), ("lars_b32", False)]
    assert "recorded [1/2] sgd_b32" in capsys.readouterr().out


def test_plot_only_reports_the_finished_runs_only(tmp_path: Path) -> None:
    study = Recorded(tmp_path)
    assert run_study(study, plot_only=True) == ["sgd_b32"]
    assert study.steps == ["finished", "report"]
