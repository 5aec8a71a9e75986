"""The study skeleton calls a study's steps in order, `--plot-only` trains nothing, and every
study's JSON report is written by one atomic, checked writer."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from vidscale import atomic
from vidscale.studies import runs as study_runs
from vidscale.studies import skeleton
from vidscale.studies.runs import StudyRun
from vidscale.studies.skeleton import Study, run_study, write_report_json
from vidscale.studies.sweep import SweepSpec, design_sweep


class Recorded(Study[list[str]]):
    """The sweep's real runs, with every step noted."""

    label = "recorded"

    def __init__(self, out: Path) -> None:
        self.out, self.nproc = out, 1
        self.steps: list[str] = []
        self.spec = SweepSpec("demo_tsm_r18_8f_b32_e12", out, ("data.root=/x",), batches=(32,))

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


def test_a_report_is_written_atomically_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "study.json"
    write_report_json(path, {"recipe": "r", "runs": [{"top1": 50.0}]})
    before = path.read_text()
    assert json.loads(before) == {"recipe": "r", "runs": [{"top1": 50.0}]}

    def killed(document: Any, **kwargs: Any) -> str:
        raise KeyboardInterrupt  # the study interrupted while its report is being written

    monkeypatch.setattr(atomic.json, "dumps", killed)
    with pytest.raises(KeyboardInterrupt):
        write_report_json(path, {"recipe": "r", "runs": []})
    monkeypatch.undo()
    assert path.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "study.json"
    ]
    with pytest.raises(TypeError, match="study.json: a study report's 'runs' must be a list"):
        write_report_json(path, {"runs": [1, 2]})


def test_every_study_writes_its_json_report_through_the_one_writer() -> None:
    """No study writes JSON by hand (`write_text(json.dumps(...))`, `json.dump`): each goes
    through `write_report_json`, atomic and checked."""
    studies = Path(skeleton.__file__).parent
    by_hand = []
    for path in sorted(studies.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Attribute) and func.attr in ("write_text", "dump"):
                by_hand.append(f"{path.name}:{func.lineno}")
    assert by_hand == []
    assert "write_report_json" in (studies / "multigrid.py").read_text()
