"""`bench cluster --combine` (`report.combine`) on recorded results: a pass one run lost and
another measured is not named as failed in the combined result. The check against real
two-node rows (`report.standin_check`) on a recorded pair: each difference split into the
communication each side waited and each side's compute over the control."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from vidscale.bench.cluster.report import (
    ClusterResult,
    combine,
    format_standin_check,
    standin_check,
)

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
RECORDED = RESULTS / "cluster_two_nodes_lockstep_2_repeat1.json"
# An in-pass run and the real rows it was checked against.
IN_PASS, REAL = (
    RESULTS / "cluster_two_nodes_in_pass.json",
    RESULTS / "network_scaling_lockstep_12steps.json",
)
LOST = "2 nodes at 2gbit: vidscale.bench.cluster.rank on 2 nodes exited [-9, 1]"


def _split_by_rate() -> tuple[ClusterResult, ClusterResult]:
    """The recorded run as two: one that lost its 2 Gbit/s pass, one that measured only it."""
    whole = ClusterResult.read(RECORDED)
    assert {row.rate for row in whole.rows} == {"500mbit", "2gbit"}
    lost = replace(
        whole,
        settings={**whole.settings, "failed": [LOST]},
        rows=[row for row in whole.rows if row.rate == "500mbit"],
    )
    measured = replace(whole, rows=[row for row in whole.rows if row.rate == "2gbit"])
    return lost, measured


def test_a_pass_another_run_measured_is_not_named_failed() -> None:
    lost, measured = _split_by_rate()
    combined = combine([lost, measured])
    assert combined.settings["failed"] == []
    assert len(combined.rows) == len(lost.rows) + len(measured.rows)
    assert {row.run for row in combined.rows if row.rate == "2gbit"} == {1}


def test_a_pass_no_run_measured_stays_named_failed(tmp_path: Path) -> None:
    lost, measured = _split_by_rate()
    other = replace(measured, rows=[row for row in measured.rows if row.nodes != 2])
    combined = combine([lost, other])
    assert combined.settings["failed"] == [LOST]
    path = tmp_path / "combined.json"  # as the command writes it and a reader reads it back
    path.write_text(json.dumps(combined.to_dict()))
    assert ClusterResult.read(path).settings["failed"] == [LOST]


def test_the_check_splits_each_difference_into_communication_and_compute() -> None:
    result = ClusterResult.read(IN_PASS)
    real = {(r["rate"], r["model"], r["variant"]): r for r in json.loads(REAL.read_text())["rows"]}
    checks = standin_check(result, REAL)
    assert len(checks) == 20
    for c in checks:
        found = real[c.rate, c.model, c.variant]
        control = real[c.rate, c.model, "aavg k=16"]["compute_s"]  # the once-an-epoch row
        assert (c.real_s, c.real_comm_s) == (found["step_s"], found["comm_exposed_s"])
        assert c.diff == c.standin_s / c.real_s - 1
        assert c.real_compute_over_control == found["compute_s"] / control - 1
        standin = next(r for r in result.rows if (r.rate, r.model, r.variant, r.nodes) == (
            c.rate, c.model, c.variant, 2))  # fmt: skip
        assert c.standin_comm_s == standin.comm_exposed_s
        assert c.standin_compute_over_control == pytest.approx(
            (standin.step_s - standin.comm_exposed_s) / control - 1
        )
    # The control rows against themselves: no compute over the control on the real side.
    assert {c.real_compute_over_control for c in checks if c.variant == "aavg k=16"} == {0.0}
    table = format_standin_check(result, REAL)
    assert "comm s" in table and "compute/control" in table
    first = checks[0]
    line = next(x for x in table.splitlines() if f" {first.variant} " in x and first.rate in x)
    assert f"{first.diff:+.1%}" in line and f"{first.real_compute_over_control:+.1%}" in line


def test_without_a_once_an_epoch_row_the_check_has_no_control(tmp_path: Path) -> None:
    measured = json.loads(REAL.read_text())
    measured["settings"]["epoch_k"] = 0  # a real run that measured no AAVG row an epoch long
    real = tmp_path / "network.json"
    real.write_text(json.dumps(measured))
    result = ClusterResult.read(IN_PASS)
    checks = standin_check(result, real)
    assert checks and all(c.control_s is None for c in checks)
    assert all(c.real_compute_over_control is None for c in checks)
    rows = format_standin_check(result, real).splitlines()[3:]
    assert rows and all(line.split()[-2:] == ["-", "-"] for line in rows)
