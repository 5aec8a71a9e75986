"""`bench cluster --combine` (`report.combine`) on recorded results: a pass one run lost and
another measured is not named as failed in the combined result."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from vidscale.bench.cluster.report import ClusterResult, combine

RECORDED = (
    Path(__file__).resolve().parents[3]
    / "docs"
    / "results"
    / "cluster_two_nodes_lockstep_2_repeat1.json"
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
