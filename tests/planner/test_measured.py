"""`plan --measured` on the typed `bench scaling` report: the committed JSON gives the inputs
and plan numbers the string-keyed reader gave, and a file missing a key the planner needs is one
line naming `--measured`, the file and the key."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.planner.test_capacity import MEASURED_MODEL, measured_json
from vidscale.cli import main
from vidscale.errors import InputError
from vidscale.planner import capacity
from vidscale.planner.capacity import PlanRequest
from vidscale.planner.measured import read_measured

__all__ = ["measured_json"]  # the fixture, shared with tests/planner/test_capacity.py

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "results" / "bench_scaling.json"

# What `read_measured` and `capacity.plan` gave for the committed JSON when the reader took the
# JSON by string keys (before the typed report): compute and data wait per step, the overlap
# (in flight, exposed, predicted exposed, buckets), and (train_s, compute_s, comm_s, clips/s)
# of 1 and 2 `local` processes and 6 Summit GPUs.
BEFORE = {
    "tsm_resnet50": {
        "measured": (1.745845362500404, 0.0008028447500691982),
        "overlap": (0.2391700428115655, 0.061430839750755695, 0.0193799090381217, 4),
        "local1": (20950144.350004848, 1.745845362500404, 0.0, 1.1455768322662867),
        "local2": (10591903.389231155, 1.745845362500404, 0.019471869038121703, 2.2658816945404667),
        "summit6": (
            3496485.6283336026,
            1.745845362500404,
            0.0023974516663973766,
            6.864035077255046,
        ),
    },
    "tsm_resnet18": {
        "measured": (0.5282462782515722, 0.0008864722494763555),
        "overlap": (0.06948745362524278, 0.026220270875455753, 0.025004101287202707, 2),
        "local1": (6338955.339018867, 0.5282462782515722, 0.0, 3.7861128082525157),
        "local2": (3320054.0372326495, 0.5282462782515722, 0.02509606128720271, 7.228798004747121),
        "summit6": (
            1061627.9055010483,
            0.5282462782515722,
            0.0025676744989518996,
            22.60679083098603,
        ),
    },
}
REQUESTS = {
    "local1": PlanRequest(hardware="local", gpus=1),
    "local2": PlanRequest(hardware="local", gpus=2),
    "summit6": PlanRequest(gpus=6),
}


@pytest.mark.parametrize("model", list(BEFORE))
def test_the_committed_json_gives_the_plan_numbers_it_gave_before(model: str) -> None:
    m = read_measured(COMMITTED, model)
    before = BEFORE[model]
    assert (m.compute_s, m.data_wait_s) == before["measured"]
    assert (m.batch, m.threads, m.frames, m.size) == (2, 1, 8, 224)
    assert m.label == f"{model} 1 process" and m.device_name == "Intel(R) Xeon(R) Processor"
    o = m.overlap
    assert o is not None and o.procs == 2
    assert (o.in_flight_s, o.exposed_s, o.predicted_exposed_s, o.buckets) == pytest.approx(
        before["overlap"], rel=1e-12
    )
    for name, req in REQUESTS.items():
        p = capacity.plan(capacity.with_measured(dataclasses.replace(req, model=model), m))
        got = (p.prediction.train_s, p.prediction.step.compute_s, p.prediction.step.comm_s)
        assert (*got, p.prediction.clips_per_s) == pytest.approx(before[name], rel=1e-12), name


def _without(*path: str) -> Callable[[dict[str, Any]], None]:
    def change(report: dict[str, Any]) -> None:
        node: Any = report
        for part in path[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[path[-1]]

    return change


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_without("runs", "0", "compute_s"), "no 'compute_s' in runs[0]"),
        (_without("runs", "0", "batch_per_process"), "no 'batch_per_process' in runs[0]"),
        (_without("runs", "1", "comm_in_flight_s"), "no 'comm_in_flight_s' in runs[1]"),
        (_without("runs", "1", "forward_sync_s"), "no 'forward_sync_s' in runs[1]"),
        (_without("settings", "frames"), "no 'frames' in settings"),
        (_without("settings", "bucket_cap_mb"), "no 'bucket_cap_mb' in settings"),
        (_without("host", "name"), "no 'name' in host"),
    ],
)
def test_a_file_missing_a_key_the_planner_needs_is_one_line_naming_it(
    measured_json: Path, change: Callable[[dict[str, Any]], None], named: str
) -> None:
    report = json.loads(measured_json.read_text())
    change(report)
    measured_json.write_text(json.dumps(report))
    with pytest.raises(InputError) as err:
        read_measured(measured_json, MEASURED_MODEL)
    message = str(err.value)
    assert message.startswith(f"--measured: {measured_json}: not a complete ")
    assert named in message and "\n" not in message


def test_the_plan_command_prints_that_line(
    measured_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads(measured_json.read_text())
    del report["runs"][0]["data_wait_s"]
    measured_json.write_text(json.dumps(report))
    assert main(["plan", "--measured", str(measured_json), "--hardware", "local"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vidscale: error: --measured: {measured_json}: not a complete")
    assert "no 'data_wait_s' in runs[0]" in err and len(err.strip().splitlines()) == 1
