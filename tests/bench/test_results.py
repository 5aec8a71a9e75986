"""The benches' typed results: each reads back what it writes (`from_dict(to_dict(x)) == x`, down
to the JSON text), the committed `bench scaling` JSON reads as its typed report and writes back
byte for byte, and a file missing a key or holding one of another type is one line naming the
file and the key."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.bench.test_gpu_report import HOST, row, shard_train
from tests.planner.test_capacity import scaling_run
from vidscale.bench.compute.profile import ProfiledStep, ProfileResult, summarise
from vidscale.bench.compute.throughput import ThroughputConfig, ThroughputResult
from vidscale.bench.data.shard_train import ShardTrainResult
from vidscale.bench.results import HostInfo, read_json
from vidscale.bench.scaling.config import ScalingConfig
from vidscale.bench.scaling.report import build_report
from vidscale.bench.scaling.result import LATER_SETTINGS, ScalingResult
from vidscale.errors import InputError

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
COMMITTED_SCALING = RESULTS / "bench_scaling.json"


def scaling() -> ScalingResult:
    runs = [
        scaling_run(1),
        scaling_run(2, compute=3.2, exposed=0.05, in_flight=0.4, forward=0.01),
        scaling_run(2, hook="bf16", compute=3.2, exposed=0.3, in_flight=0.3),
        scaling_run(1, model="tsm_resnet18", compute=1.0),
    ]
    cfg = ScalingConfig(
        models=("tsm_resnet50", "tsm_resnet18"),
        procs=(1, 2),
        batch=2,
        threads=1,
        device="cpu",
        fast_settings=("tsm_resnet50=fp32", "tsm_resnet18=bf16"),
    )
    return build_report(cfg, runs)


def throughput() -> ThroughputResult:
    rows = (row("tsm_resnet50", 500.0), row("tsm_resnet50", 550.0, compiled=True))
    return ThroughputResult(HOST, ThroughputConfig(models=("tsm_resnet50",)), 7e14, rows, False)


def profile() -> ProfileResult:
    spans = [
        {"name": "aten::conv3d", "ts": 0, "dur": 10, "tid": 1},
        {"name": "aten::relu", "ts": 2, "dur": 3, "tid": 1},
        {"name": "aten::add", "ts": 14, "dur": 6, "tid": 1},
    ]
    step = {"model": "tsm_resnet18", "batch": 2, "input": "4x3x32x32", "setting": "fp32"}
    summary = summarise(spans, nested=True, top=2)
    measured = ProfiledStep.of(step | {"timeline": "cpu operators"} | summary)
    return ProfileResult(HOST, (measured,))


RESULT_TYPES: dict[str, tuple[Any, Callable[[], Any]]] = {
    "scaling": (ScalingResult, scaling),
    "throughput": (ThroughputResult, throughput),
    "profile": (ProfileResult, profile),
    "shard-train": (ShardTrainResult, shard_train),
}


@pytest.mark.parametrize("bench", list(RESULT_TYPES))
def test_every_typed_result_reads_back_what_it_writes(bench: str, tmp_path: Path) -> None:
    kind, make = RESULT_TYPES[bench]
    result = make()
    document = result.to_dict()
    assert kind.from_dict(document) == result
    text = json.dumps(document, indent=2)
    assert json.loads(text) == document  # JSON-native: lists, not tuples
    path = tmp_path / f"{bench}.json"
    path.write_text(text)
    again = kind.read(path)
    assert again == result and json.dumps(again.to_dict(), indent=2) == text


def test_the_host_keeps_the_keys_a_bench_adds_in_order() -> None:
    described = HOST.to_dict() | {"load_average_end": 1.5}
    host = HostInfo.of(described)
    assert host.extra == {"load_average_end": 1.5}
    assert list(host.to_dict()) == list(described) and host.to_dict() == described


def test_the_committed_scaling_json_is_a_typed_report_written_back_byte_for_byte() -> None:
    report = ScalingResult.read(COMMITTED_SCALING)
    # Written before the fast-path settings and --data were recorded: their defaults.
    assert report.unrecorded == LATER_SETTINGS
    assert report.settings.fast_settings == () and report.settings.data == ""
    assert report.settings.procs == (1, 2) and report.host.name == "Intel(R) Xeon(R) Processor"
    assert report.models == ["tsm_resnet50", "tsm_resnet18"]
    single, ddp = report.runs_of("tsm_resnet50")[:2]
    assert (single.label, ddp.label) == ("tsm_resnet50 1 process", "tsm_resnet50 ddp, 2 processes")
    assert single.efficiency == 1.0 and ddp.speedup is not None
    assert [r.rank for r in ddp.ranks] == [0, 1]
    assert len(ddp.ranks[1].step_s) == report.settings.steps
    # Measured before the process's CPU time was recorded: none, and none written back.
    assert ddp.process_cpu_s is None and ddp.ranks[0].process_cpu_s == ()
    text = COMMITTED_SCALING.read_text()
    assert json.dumps(report.to_dict(), indent=2) + "\n" == text


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    """Remove the key at `path` (`runs.0.compute_s`) from a document."""

    def change(document: dict[str, Any]) -> None:
        *parents, key = path.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[key]

    return change


@pytest.mark.parametrize(
    ("bench", "path", "named"),
    [
        ("scaling", "runs.0.compute_s", "no 'compute_s' in runs[0]"),
        ("scaling", "runs.1.comm_in_flight_s", "no 'comm_in_flight_s' in runs[1]"),
        ("scaling", "runs.1.ranks.0.step_s", "no 'step_s' in runs[1].ranks[0]"),
        ("scaling", "settings.frames", "no 'frames' in settings"),
        ("scaling", "host.name", "no 'name' in host"),
        ("scaling", "definitions", "no 'definitions'"),
        ("throughput", "rows.1.clips_per_s", "no 'clips_per_s' in rows[1]"),
        ("throughput", "peak_flops_per_s", "no 'peak_flops_per_s'"),
        ("throughput", "settings.setting", "no 'setting' in settings"),
        ("profile", "models.0.top.0.share", "no 'share' in models[0].top[0]"),
        ("profile", "models.0.idle_share", "no 'idle_share' in models[0]"),
        ("shard-train", "data_wait_fraction", "no 'data_wait_fraction'"),
        ("shard-train", "settings.root", "no 'root' in settings"),
    ],
)
def test_a_missing_key_is_one_line_naming_the_file_and_the_key(
    bench: str, path: str, named: str, tmp_path: Path
) -> None:
    kind, make = RESULT_TYPES[bench]
    document = make().to_dict()
    _drop(path)(document)
    file = tmp_path / "result.json"
    file.write_text(json.dumps(document))
    with pytest.raises(InputError) as err:
        kind.read(file)
    message = str(err.value)
    assert message.startswith(f"{file}: not a complete `vidscale bench {bench}` JSON")
    assert named in message and "\n" not in message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("bench", "change", "named"),
    [
        ("scaling", lambda d: d["runs"][0].update(procs="1"), "runs[0].procs: expected an integer"),
        ("scaling", lambda d: d["runs"][0].update(speedup="x"), "runs[0].speedup: expected a num"),
        ("scaling", lambda d: d["settings"].update(device="tpu"), "settings.device: expected auto"),
        ("scaling", lambda d: d["runs"][1]["ranks"][0]["step_s"].append(None), "step_s[2]"),
        (
            "throughput",
            lambda d: d["rows"][0].update(compiled=0),
            "rows[0].compiled: expected true",
        ),
        ("throughput", lambda d: d.update(rows={}), "rows: expected a list"),
        ("profile", lambda d: d["models"][0].update(gaps=1.5), "models[0].gaps: expected an int"),
        ("shard-train", lambda d: d.update(videos=True), "videos: expected an integer, got True"),
    ],
)
def test_an_ill_typed_key_is_one_line_naming_the_file_and_the_key(
    bench: str, change: Callable[[dict[str, Any]], None], named: str, tmp_path: Path
) -> None:
    kind, make = RESULT_TYPES[bench]
    document = make().to_dict()
    change(document)
    file = tmp_path / "result.json"
    file.write_text(json.dumps(document))
    with pytest.raises(InputError) as err:
        kind.read(file)
    message = str(err.value)
    assert message.startswith(f"{file}: bad `vidscale bench {bench}` JSON (")
    assert named in message and "\n" not in message


def test_unreadable_files_and_other_documents_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(InputError, match=f"{missing}: cannot read it"):
        read_json(missing, what="`vidscale bench scaling`")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(InputError, match=f"{broken}: not JSON"):
        ThroughputResult.read(broken)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(InputError, match="not a `vidscale bench profile` JSON"):
        ProfileResult.read(listed)
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"benchmark": "models", "runs": []}))
    with pytest.raises(InputError, match='no "benchmark": "scaling"'):
        ScalingResult.read(models)
