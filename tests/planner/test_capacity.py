"""The capacity planner behind `vidscale plan`: durations, the target inversion against the
forward computation, measured overrides, the recipes' batch evidence, bad requests, and the
inputs read from a `vidscale bench scaling` JSON (`--measured`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from vidscale.bench.scaling.config import ScalingConfig, Variant
from vidscale.bench.scaling.report import build_report
from vidscale.bench.scaling.worker import StepSamples
from vidscale.distributed.sync.comm_hooks import HookName
from vidscale.models.costs import model_costs
from vidscale.planner import capacity, clusters
from vidscale.planner.capacity import PlanRequest
from vidscale.planner.durations import format_duration, parse_duration
from vidscale.planner.measured import read_measured
from vidscale.planner.report import format_plan, format_table, plan_as_dict


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900), ("1h30m", 5400), ("10m9s", 609), ("1.5h", 5400), ("2d", 172800), ("90", 90)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "15x", "m", "-5m", "0s", "5m junk"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_format_duration_writes_table3_style() -> None:
    assert format_duration(179_700) == "49h 55m"
    assert format_duration(853) == "14m 13s"
    assert format_duration(9.54) == "9.5s"


def test_plan_at_1536_gpus_is_near_table3_and_its_all_reduce_is_eq1_worked_by_hand() -> None:
    """Checked against numbers worked outside the planner: the paper's printed time, the
    baseline step it is calibrated from, and Eq. 1 for one ring all-reduce of the gradients."""
    result = capacity.plan(PlanRequest(gpus=1536))
    p = result.prediction
    assert p.global_batch == 12_288 and result.batch_ok is True
    # Table 3 prints 14m 13s = 853 s. The model sees only the 6-GPU baseline row and
    # underestimates every later row by 7-13% (docs/scaling.md: -9.0% at this row).
    assert p.train_s == pytest.approx(853, rel=0.12)
    # The baseline runs 16 clips per GPU in 179,700 s / (100 x 240,000 / 96) = 0.7188 s per
    # step; at 8 clips a step takes at least half of that (the per-clip part halves, the
    # fixed part stays) and less than all of it.
    baseline_step = 179_700 / (100 * 240_000 / 96)
    assert baseline_step / 2 <= p.step.compute_s < baseline_step
    # Eq. 1 for a ring of P = 1536 GPUs on N = 256 Summit nodes: 2(P-1)/P x S / B plus NCCL's
    # ring latency. S: ResNet-50's 23,508,032 trunk weights and a 2048 x 400 classifier, fp32.
    # B: two EDR rails of 100 Gb/s at 12.2/12.5 achieved (24.4 GB/s, under the 32 GB/s X-Bus).
    gpus, nodes = 1536, 256
    grad_bytes = 4 * (23_508_032 + 2048 * 400 + 400)
    transfer = 2 * (gpus - 1) / gpus * grad_bytes / (2 * 100e9 / 8 * 12.2 / 12.5)
    # 8.4 us once, 3.4 us per NVLink hop, 9.6 us per network hop, x 1.9 for a large message.
    hops = 2 * (gpus - 1)
    network_hops = 2 * (nodes - 1)
    latency = 1.9e-6 * (8.4 + 3.4 * (hops - network_hops) + 9.6 * network_hops)
    assert p.step.allreduce_s == pytest.approx(transfer + latency, rel=1e-9)
    assert p.step.comm_s < p.step.allreduce_s  # most of it hides behind the backward pass
    assert p.bottleneck == "compute"
    text = format_plan(result)
    assert "time to train" in text and "12,288" in text and "bottleneck" in text


def test_target_inversion_agrees_with_the_forward_computation() -> None:
    req = PlanRequest()
    found = capacity.gpus_for_target(req, 15 * 60)
    assert found.result is not None
    gpus = found.result.prediction.gpus
    assert capacity.plan(req, gpus=gpus).prediction.train_s <= 15 * 60
    fewer = capacity.plan(req, gpus=gpus - 6).prediction.train_s
    assert fewer > 15 * 60


def test_unreachable_target_reports_the_fastest() -> None:
    req = PlanRequest(hardware="paper-p100")
    found = capacity.gpus_for_target(req, 60.0)
    assert found.result is None
    assert found.best.prediction.gpus == 32  # the preset's 8 nodes


def test_measured_step_time_replaces_the_preset() -> None:
    req = PlanRequest(gpus=48)
    preset = capacity.plan(req)
    measured = capacity.plan(dataclasses.replace(req, step_time=preset.prediction.step.compute_s))
    assert measured.prediction.train_s == pytest.approx(preset.prediction.train_s, rel=1e-9)
    slower = capacity.plan(dataclasses.replace(req, step_time=2 * preset.prediction.step.compute_s))
    assert slower.prediction.train_s > 1.9 * preset.prediction.train_s


def test_network_overrides_move_the_communication() -> None:
    base = PlanRequest(model="i3d_resnet50_3x3x3", hardware="paper-p100", gpus=32)
    slow = capacity.plan(base).prediction
    fast = capacity.plan(dataclasses.replace(base, bandwidth_gbps=100.0)).prediction
    bf16 = capacity.plan(dataclasses.replace(base, grad_dtype="bf16")).prediction
    assert fast.step.comm_s < slow.step.comm_s and bf16.step.comm_s < slow.step.comm_s
    assert slow.bottleneck == "network" and fast.bottleneck == "compute"


def test_hardware_without_a_compute_rate_needs_a_step_time() -> None:
    with pytest.raises(ValueError, match="--step-time"):
        capacity.plan(PlanRequest(hardware="dgx-h100", gpus=64))
    result = capacity.plan(PlanRequest(hardware="dgx-h100", gpus=64, step_time=0.1))
    assert result.prediction.nodes == 8 and result.setup.cluster.bucketing.framework == "ddp"
    assert capacity.plan(PlanRequest(hardware="dgx-a100", gpus=16)).prediction.clips_per_s > 0


def test_batch_limit_comes_from_table3() -> None:
    limit = capacity.batch_limit("tsm_resnet50")
    assert limit is not None and limit.keeps == 12_288
    assert "72.52" in limit.source and "1.6 points" in limit.source
    assert capacity.batch_limit("i3d_resnet50_3x3x3") is None
    assert capacity.plan(PlanRequest(gpus=2304)).batch_ok is False


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"model": "nope"}, "--model"),
        ({"hardware": "nope"}, "--hardware"),
        ({"gpus": 0}, "--world-size"),
        ({"gpus": 100}, "--world-size"),
        ({"bandwidth_gbps": -1.0}, "--bandwidth-gbps"),
        ({"latency_us": -1.0}, "--latency-us"),
        ({"grad_dtype": "int8"}, "--grad-dtype"),
        ({"epochs": 0.0}, "--epochs"),
    ],
)
def test_bad_requests_name_the_option(change: dict[str, object], flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        capacity.plan(dataclasses.replace(PlanRequest(), **change))  # type: ignore[arg-type]


def test_compare_is_model_major_and_json_ready() -> None:
    models = ("tsm_resnet50", "i3d_resnet50_3x3x3")
    results = capacity.compare(PlanRequest(), models, (6, 48))
    assert [(r.setup.request.model, r.prediction.gpus) for r in results] == [
        (m, g) for m in models for g in (6, 48)
    ]
    assert "i3d_resnet50_3x3x3" in format_table(results)
    row = plan_as_dict(results[0])
    assert row["efficiency"] == pytest.approx(1.0) and row["batch_limit"] == 12_288
    assert capacity.default_gpu_counts(PlanRequest())[:3] == (6, 12, 24)


def test_compare_scales_a_measured_step_to_the_other_models() -> None:
    req = PlanRequest(hardware="dgx-h100", step_time=0.05)
    tsm, i3d = capacity.compare(req, ("tsm_resnet50", "i3d_resnet50_3x3x3"), (8,))
    assert tsm.prediction.step.compute_s == pytest.approx(0.05)
    ratio = 84.8 / 63.1  # Table 1: TSM's throughput over I3D 3x3x3's on one P100
    assert i3d.prediction.step.compute_s == pytest.approx(0.05 * ratio, rel=1e-6)
    assert any("measured step" in note for note in i3d.setup.notes)


# -- plan --measured: a `vidscale bench scaling` JSON as the planner's inputs ------------------

MEASURED_MODEL = "tsm_resnet50"


def scaling_run(
    procs: int,
    *,
    model: str = MEASURED_MODEL,
    hook: HookName = "none",
    compute: float = 3.0,
    data: float = 0.002,
    exposed: float = 0.0,
    in_flight: float = 0.0,
    forward: float = 0.0,
    steps: int = 2,
) -> dict[str, Any]:
    """One measurement as `bench scaling`'s workers hand it to `build_report`: every rank and
    step the same (`exposed`, `in_flight` are the all-reduce's, `forward` the buffer
    broadcast, which the report adds to both)."""
    params = model_costs(model).params
    nbytes = 4 * params if procs > 1 else 0
    variant = Variant("single") if procs == 1 else Variant("ddp", hook)
    comm_exposed, comm_in_flight = exposed + forward, in_flight + forward
    samples = StepSamples(
        rank=0,
        step_s=[compute + data + comm_exposed] * steps,
        data_wait_s=[data] * steps,
        comm_exposed_s=[comm_exposed] * steps,
        forward_sync_s=[forward] * steps,
        comm_in_flight_s=[comm_in_flight] * steps,
        comm_bytes=[nbytes] * steps,
        comm_rounds=[1 if nbytes else 0] * steps,
        thread_cpu_s=[compute] * steps,
    )
    return {
        "model": model,
        **variant.as_dict(),
        "procs": procs,
        "device": "cpu",
        "fast_path": "device cpu",
        "params": params,
        "grad_bytes": 4 * params,
        "load_average": [None, None],
        "ranks": [asdict(dataclasses.replace(samples, rank=r)) for r in range(procs)],
    }


def write_scaling_json(
    path: Path,
    runs: list[dict[str, Any]],
    *,
    batch: int = 2,
    frames: int = 8,
    size: int = 224,
    gpu: str | None = None,
) -> Path:
    """A `bench scaling` JSON written by its own report builder; `gpu` relabels it as measured
    on that GPU (the builder describes the host it runs on)."""
    models = tuple(dict.fromkeys(r["model"] for r in runs))
    cfg = ScalingConfig(
        models=models, procs=(1, 2), batch=batch, frames=frames, size=size, threads=1, device="cpu"
    )
    report = build_report(cfg, runs).to_dict()
    if gpu is not None:
        report["host"]["name"] = gpu
        for row in report["runs"]:
            row["device"] = "cuda:0"
    path.write_text(json.dumps(report))
    return path


@pytest.fixture
def measured_json(tmp_path: Path) -> Path:
    """1 process (3 s of compute per step at 2 clips, 2 ms data wait) and 2 processes of plain
    DDP (3.2 s compute; 0.4 s of all-reduce in flight, 0.05 s of it exposed; a 0.01 s forward
    buffer broadcast on top), plus a bf16 run and another model."""
    runs = [
        scaling_run(1),
        scaling_run(2, compute=3.2, exposed=0.05, in_flight=0.4, forward=0.01),
        scaling_run(2, hook="bf16", compute=3.2, exposed=0.3, in_flight=0.3),
        scaling_run(1, model="tsm_resnet18", compute=1.0),
    ]
    return write_scaling_json(tmp_path / "bench_scaling.json", runs)


def test_measured_compute_is_the_one_process_step_at_its_batch(measured_json: Path) -> None:
    m = read_measured(measured_json, MEASURED_MODEL)
    assert (m.batch, m.device, m.label) == (2, "cpu", f"{MEASURED_MODEL} 1 process")
    assert m.compute_s == pytest.approx(3.0) and m.clip_s == pytest.approx(1.5)
    assert m.data_clip_s == pytest.approx(0.001)
    req = capacity.with_measured(PlanRequest(hardware="local", gpus=1), m)
    result = capacity.plan(req)
    # The measured batch, its compute per step, its data wait per clip.
    assert req.batch_per_gpu == 2 and req.data_time == pytest.approx(0.001)
    assert result.prediction.step.compute_s == pytest.approx(3.0)
    assert result.prediction.clips_per_s == pytest.approx(2 / 3.0)
    # Another batch scales the per-clip work: a CPU's step has no fixed part, also on a GPU
    # preset (whose own fixed share would give 3 / (2 + 1) * (8 + 1) = 9 s).
    for hw in ("local", "summit"):
        other = capacity.with_measured(
            PlanRequest(hardware=hw, batch_per_gpu=8, gpus=1), m, keep_batch=True
        )
        assert capacity.plan(other).prediction.step.compute_s == pytest.approx(4 * 3.0)
    notes = "\n".join(result.setup.notes)
    assert str(measured_json) in notes and f"run {MEASURED_MODEL} 1 process" in notes
    assert "device cpu" in notes and "1.5 s per clip" in notes and "0.001 s" not in notes


def test_measured_step_of_a_gpu_keeps_the_presets_fixed_share(tmp_path: Path) -> None:
    path = write_scaling_json(tmp_path / "gpu.json", [scaling_run(1)], gpu="NVIDIA H100")
    m = read_measured(path, MEASURED_MODEL)
    req = capacity.with_measured(
        PlanRequest(hardware="summit", batch_per_gpu=8, gpus=6), m, keep_batch=True
    )
    fixed = clusters.SUMMIT.fixed_images * clusters.RESNET50_MACS / model_costs(MEASURED_MODEL).macs
    expected = 3.0 / (2 + fixed) * (8 + fixed)
    assert capacity.plan(req).prediction.step.compute_s == pytest.approx(expected)
    assert capacity.measured_warnings(req) == []


def test_measured_clips_of_another_size_are_scaled_by_macs(tmp_path: Path) -> None:
    path = write_scaling_json(tmp_path / "small.json", [scaling_run(1)], frames=8, size=112)
    m = read_measured(path, MEASURED_MODEL)
    ratio = model_costs(MEASURED_MODEL).macs / model_costs(MEASURED_MODEL, size=112).macs
    assert 3.5 < ratio < 4.5
    result = capacity.plan(capacity.with_measured(PlanRequest(hardware="local", gpus=1), m))
    assert result.prediction.step.compute_s == pytest.approx(3.0 * ratio)
    assert any("by MACs" in note and "8x112²" in note for note in result.setup.notes)


def test_explicit_inputs_win_over_the_file(measured_json: Path) -> None:
    m = read_measured(measured_json, MEASURED_MODEL)
    given = PlanRequest(
        hardware="local", gpus=2, step_time=0.5, data_time=0.01, bandwidth_gbps=10.0
    )
    req = capacity.with_measured(given, m)
    assert req.from_measured == frozenset()
    assert (req.step_time, req.data_time, req.bandwidth_gbps) == (0.5, 0.01, 10.0)
    assert req.batch_per_gpu == 8  # the batch of an explicit step time: --batch-per-gpu's
    result = capacity.plan(req)
    assert result.prediction.step.compute_s == pytest.approx(0.5)
    notes = "\n".join(result.setup.notes)
    assert notes.count("not used") == 3  # compute, data wait and bandwidth each say so
    taken = capacity.with_measured(PlanRequest(hardware="local", gpus=2), m)
    assert taken.from_measured == {"batch_per_gpu", "step_time", "data_time", "bandwidth_gbps"}
    # A preset with a network keeps it: the file's loopback rate is not a cluster's.
    summit = capacity.with_measured(PlanRequest(gpus=6), m)
    assert summit.bandwidth_gbps is None and "bandwidth_gbps" not in summit.from_measured


def test_measured_overlap_is_the_two_process_ddp_runs(measured_json: Path) -> None:
    m = read_measured(measured_json, MEASURED_MODEL)
    o = m.overlap
    assert o is not None and o.procs == 2 and o.label == f"{MEASURED_MODEL} ddp, 2 processes"
    # The forward buffer broadcast is not the gradient all-reduce: out of both.
    assert o.in_flight_s == pytest.approx(0.4) and o.exposed_s == pytest.approx(0.05)
    assert o.hidden == pytest.approx(1 - 0.05 / 0.4)
    nbytes = 4 * model_costs(MEASURED_MODEL).params
    assert o.nbytes == nbytes and o.bandwidth_gbps == pytest.approx(nbytes * 8 / 0.4 / 1e9)
    # The prediction is the planner's own for that run: 2 processes of `local` at the measured
    # bandwidth and the run's compute (the ring's latency, microseconds, aside).
    same = PlanRequest(hardware="local", gpus=2, batch_per_gpu=2, step_time=3.2)
    same = dataclasses.replace(same, bandwidth_gbps=o.bandwidth_gbps)
    planned = capacity.plan(same).prediction.step
    assert planned.comm_s == pytest.approx(o.predicted_exposed_s, abs=1e-3)
    assert 0 < o.predicted_exposed_s < o.in_flight_s and o.buckets == 4
    text = format_plan(capacity.plan(capacity.with_measured(PlanRequest(hardware="local"), m)))
    line = next(x for x in text.splitlines() if x.startswith("  overlap"))
    assert "measured 87.5% of the all-reduce hidden" in line
    assert f"{100 * o.predicted_hidden:.1f}%" in line and str(measured_json) in line
    row = plan_as_dict(capacity.plan(capacity.with_measured(PlanRequest(hardware="local"), m)))
    assert row["measured"]["overlap"]["hidden"] == pytest.approx(0.875)


def test_without_a_multi_process_run_there_is_no_overlap(tmp_path: Path) -> None:
    path = write_scaling_json(tmp_path / "one.json", [scaling_run(1)])
    m = read_measured(path, MEASURED_MODEL)
    assert m.overlap is None and "no multi-process plain-DDP run" in m.no_overlap
    req = capacity.with_measured(PlanRequest(hardware="local", gpus=2), m)
    with pytest.raises(ValueError, match=f"--bandwidth-gbps: .*{path}"):
        capacity.plan(req)
    result = capacity.plan(dataclasses.replace(req, bandwidth_gbps=1.0))
    assert "overlap        not measured" in format_plan(result)


def test_a_cpu_measurement_on_a_gpu_preset_warns(measured_json: Path, tmp_path: Path) -> None:
    m = read_measured(measured_json, MEASURED_MODEL)
    (warning,) = capacity.measured_warnings(capacity.with_measured(PlanRequest(), m))
    assert "CPU" in warning and "V100" in warning and str(measured_json) in warning
    assert (
        capacity.measured_warnings(capacity.with_measured(PlanRequest(hardware="local"), m)) == []
    )
    given = capacity.with_measured(PlanRequest(step_time=0.5), m)  # not the file's compute
    assert capacity.measured_warnings(given) == []
    gpu = write_scaling_json(tmp_path / "gpu.json", [scaling_run(1)], gpu="NVIDIA H100")
    on_gpu = read_measured(gpu, MEASURED_MODEL)
    (warning,) = capacity.measured_warnings(
        capacity.with_measured(PlanRequest(hardware="local"), on_gpu)
    )
    assert "GPU (NVIDIA H100)" in warning


def overwrite(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _rewrite(path: Path, change: Callable[[dict[str, Any]], object]) -> Path:
    report = json.loads(path.read_text())
    change(report)
    path.write_text(json.dumps(report))
    return path


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.with_name("missing.json"), "cannot read it"),
        (lambda p: overwrite(p, "{not json"), "not JSON"),
        (lambda p: overwrite(p, '{"benchmark": "models"}'), "not a `vidscale bench scaling`"),
        (lambda p: overwrite(p, "[1, 2]"), "not a `vidscale bench scaling`"),
        (
            lambda p: _rewrite(p, lambda r: r["runs"][0].pop("compute_s")),
            "no 'compute_s'",
        ),
        (
            lambda p: _rewrite(p, lambda r: r["runs"][0].update(batch_per_process="two")),
            "bad `vidscale bench scaling` JSON",
        ),
    ],
)
def test_bad_measured_files_name_the_file(
    measured_json: Path, make: Callable[[Path], Path], words: str
) -> None:
    path = make(measured_json)
    with pytest.raises(ValueError, match="--measured") as err:
        read_measured(path, MEASURED_MODEL)
    assert words in str(err.value) and str(path) in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_measured_file_must_hold_the_model_and_its_one_process_run(tmp_path: Path) -> None:
    path = write_scaling_json(tmp_path / "r18.json", [scaling_run(1, model="tsm_resnet18")])
    with pytest.raises(ValueError, match=r"no runs of --model tsm_resnet50; its models: tsm_r"):
        read_measured(path, MEASURED_MODEL)
    only_two = write_scaling_json(
        tmp_path / "two.json", [scaling_run(2, exposed=0.1, in_flight=0.2)]
    )
    with pytest.raises(ValueError, match="no 1-process run of tsm_resnet50 \\(only 2 processes"):
        read_measured(only_two, MEASURED_MODEL)
