"""The one flow every study follows: design the runs, check the data fits them, train each one
(skipping finished runs, resuming partial ones), collect the rows back from the run
directories, and report (JSON, plot, table).

A study subclasses `Study` with its own steps; `run_study` calls them in order. With
`plot_only` nothing trains: the report is rebuilt from the runs already finished.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from vidscale.atomic import atomic_write_json
from vidscale.studies.runs import StudyRun, train_runs

Report = TypeVar("Report")


class Study(ABC, Generic[Report]):
    """A study's steps. `label` prefixes its printed lines (the command's name); `out` holds one
    directory per run; `nproc` processes train each run (torchrun when > 1)."""

    label: str
    out: Path
    nproc: int

    @abstractmethod
    def design(self) -> list[StudyRun]:
        """Every run, its config resolved and validated; ConfigError before anything trains."""

    @abstractmethod
    def check_fits(self, runs: list[StudyRun]) -> None:
        """ConfigError when a run's batch cannot be filled from the training set; may print
        what the runs will do."""

    @abstractmethod
    def finished(self) -> list[Path]:
        """`--plot-only`: the run directories to report; ConfigError if too few are finished."""

    @abstractmethod
    def report(self, run_dirs: list[Path]) -> Report:
        """Collect `run_dirs` back, write the report files under `out`, print the table."""


def run_study(study: Study[Report], *, plot_only: bool = False) -> Report:
    """Train what is missing of `study` (unless `plot_only`), then report on its runs."""
    if plot_only:
        return study.report(study.finished())
    runs = study.design()
    study.check_fits(runs)
    train_runs(runs, out=study.out, nproc=study.nproc, label=study.label)
    return study.report([run.run_dir for run in runs])


def write_report_json(path: Path, report: Mapping[str, Any]) -> Path:
    """Write a study's JSON report (`study.json`, `sweep.json`) atomically: a reader, or a
    study interrupted while reporting, sees the previous report or this one, never half of
    one. `report["runs"]` must be the study's rows, one JSON object per run. Returns `path`."""
    runs = report.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, Mapping) for r in runs):
        raise TypeError(f"{path.name}: a study report's 'runs' must be a list of objects")
    atomic_write_json(path, dict(report))
    return path
