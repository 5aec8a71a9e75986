"""`vidscale bench scaling`: real torchrun runs of 1 and 2 gloo processes, checked for what the
report claims (each part of a step is timed on its own and fits inside it, one process puts
nothing on a wire, efficiency is the paper's, bytes are the model's), and one-line errors for
bad arguments.

Speeds are measured but never asserted (they depend on the machine and its load); only shares
of a step are, where the gap is wide (data held in memory waits little).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from vidscale.bench.scaling.config import ScalingConfig
from vidscale.bench.scaling.measure import check_procs, resolve
from vidscale.bench.scaling.result import ScalingResult
from vidscale.cli import main
from vidscale.config import ConfigError
from vidscale.fastpath.settings import Candidate
from vidscale.models.registry import ModelConfig, build_model

MODEL, BATCH, STEPS, K = "tsm_resnet18", 2, 2, 2
ROW_KEYS = {
    "applied_steps",
    "model",
    "variant",
    "strategy",
    "hook",
    "k",
    "procs",
    "device",
    "fast_path",
    "params",
    "grad_bytes",
    "batch_per_process",
    "global_batch",
    "steps",
    "clips_per_s",
    "ideal_clips_per_s",
    "speedup",
    "efficiency",
    "step_s",
    "step_spread_s",
    "compute_s",
    "data_wait_s",
    "comm_exposed_s",
    "forward_sync_s",
    "comm_in_flight_s",
    "comm_bytes_per_step",
    "comm_rounds_per_step",
    "thread_cpu_s",
    "load_average",
    "ranks",
    "process_cpu_s",
}
SERIES = {
    "step_s",
    "data_wait_s",
    "comm_exposed_s",
    "forward_sync_s",
    "comm_in_flight_s",
    "comm_bytes",
    "comm_rounds",
    "thread_cpu_s",
    "compute_s",
    "process_cpu_s",
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    """One real run: 1 process, then 2 gloo processes under DDP (plain and bf16) and AAVG."""
    out = tmp_path_factory.mktemp("scaling")
    argv = [
        "bench",
        "scaling",
        "--models",
        MODEL,
        "--nproc",
        "1,2",
        "--frames",
        "8",
        "--size",
        "32",
        "--batch",
        str(BATCH),
        "--steps",
        str(STEPS),
        "--warmup",
        "1",
        "--threads",
        "1",
        "--hooks",
        "none,bf16",
        "--strategies",
        "ddp,aavg",
        "--aavg-k",
        str(K),
        "--out-json",
        str(out / "scaling.json"),
        "--plot",
        str(out / "scaling.png"),
    ]
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        assert main(argv) == 0
    return json.loads((out / "scaling.json").read_text()), table.getvalue(), out


def _rows(report: dict[str, Any]) -> dict[tuple[int, str], dict[str, Any]]:
    return {(r["procs"], r["variant"]): r for r in report["runs"]}


@pytest.mark.slow
def test_report_has_one_row_per_variant_and_process_count(measured: tuple) -> None:
    report, table, out = measured
    assert report["settings"]["procs"] == [1, 2] and report["settings"]["threads"] == 1
    assert list(_rows(report)) == [(1, "1 process"), (2, "ddp"), (2, "ddp+bf16"), (2, "aavg k=2")]
    for row in report["runs"]:
        assert set(row) == ROW_KEYS
        assert row["model"] == MODEL and row["steps"] == STEPS
        assert row["applied_steps"] == STEPS  # every measured step trained
        assert row["global_batch"] == BATCH * row["procs"]
        assert [r["rank"] for r in row["ranks"]] == list(range(row["procs"]))
        for rank in row["ranks"]:
            assert set(rank) == SERIES | {"rank"}
            assert all(len(rank[k]) == STEPS for k in SERIES)
        assert row["variant"] in table
    assert (out / "scaling.png").stat().st_size > 10_000
    assert "clips/s" in table and "effic." in table and "comm exp" in table


@pytest.mark.slow
def test_the_json_reads_back_as_the_typed_report(measured: tuple) -> None:
    report, _, out = measured
    typed = ScalingResult.read(out / "scaling.json")
    assert typed.to_dict() == report and typed.unrecorded == ()
    assert typed.settings.procs == (1, 2) and typed.settings.models == (MODEL,)
    assert [r.label for r in typed.runs] == [
        f"{MODEL} 1 process",
        f"{MODEL} ddp, 2 processes",
        f"{MODEL} ddp+bf16, 2 processes",
        f"{MODEL} aavg k=2, 2 processes",
    ]


@pytest.mark.slow
def test_every_process_count_runs_the_one_setting_the_probe_chose(measured: tuple) -> None:
    report, table, _ = measured
    (setting,) = report["settings"]["fast_settings"]
    name, _, label = setting.partition("=")
    assert name == MODEL and f"bench scaling: {MODEL}: auto chose {label} (probe" in table
    chosen = Candidate.from_label(label)
    described = {r["fast_path"] for r in report["runs"]}
    assert described == {
        f"device cpu, bf16 autocast {'on' if chosen.bf16 else 'off'}, "
        f"channels_last {'on' if chosen.channels_last else 'off'}, compile off"
    }


@pytest.mark.slow
def test_each_part_of_a_step_is_measured_on_its_own_clock_and_fits_inside_the_step(
    measured: tuple,
) -> None:
    """`compute_s` is the step less the other parts, so their sum is the step by construction;
    what can fail is each separately timed part: none negative, the data wait and the exposed
    communication together shorter than the step, exposed communication no longer than the
    communication in flight, the training thread's CPU time no longer than the step's wall
    time (one thread cannot run longer than the clock), and the whole process's CPU time no
    shorter than its training thread's (which it holds)."""
    report, _, _ = measured
    for row in report["runs"]:
        for rank in row["ranks"]:
            for step, data, comm, flight, cpu, process in zip(
                rank["step_s"],
                rank["data_wait_s"],
                rank["comm_exposed_s"],
                rank["comm_in_flight_s"],
                rank["thread_cpu_s"],
                rank["process_cpu_s"],
                strict=True,
            ):
                assert step > 0 and data >= 0 and comm >= 0 and cpu > 0
                assert data + comm < step
                assert comm <= flight + 1e-9
                # The CPU clock is read a few microseconds after the wall clock, at both ends.
                assert cpu <= step + 1e-3
                assert process >= cpu - 1e-3
        assert row["step_spread_s"]["min"] <= row["step_s"] <= row["step_spread_s"]["max"]


@pytest.mark.slow
def test_one_process_has_no_communication_and_in_memory_clips_barely_wait(
    measured: tuple,
) -> None:
    """A single process puts nothing on a wire, at any step; the clips are held in memory (no
    decoding), so waiting for data is a small share of every run's step."""
    rows = _rows(measured[0])
    (single,) = rows[(1, "1 process")]["ranks"]
    for key in ("comm_exposed_s", "comm_in_flight_s", "forward_sync_s", "comm_bytes"):
        assert set(single[key]) == {0}, key
    for row in rows.values():
        # Handing over a batch of held clips takes under a millisecond against steps of a few
        # hundred here (about 0.1% of the step); 5% leaves room for a busy machine.
        assert row["data_wait_s"] < 0.05 * row["step_s"], row["variant"]


@pytest.mark.slow
def test_communication_is_where_the_strategy_puts_it(measured: tuple) -> None:
    rows = _rows(measured[0])
    single = rows[(1, "1 process")]
    assert single["comm_exposed_s"] == 0 and single["comm_bytes_per_step"] == 0
    for variant in ("ddp", "ddp+bf16"):
        ddp = rows[(2, variant)]
        assert ddp["comm_rounds_per_step"] == 1  # one gradient all-reduce per step
        assert 0 < ddp["comm_exposed_s"] <= ddp["comm_in_flight_s"]
        assert ddp["forward_sync_s"] > 0  # DDP broadcasts BN statistics at every forward
    aavg = rows[(2, "aavg k=2")]
    assert aavg["comm_rounds_per_step"] == 1 / K  # one averaging every K steps
    assert aavg["forward_sync_s"] == 0  # no DDP
    for rank in aavg["ranks"]:  # the averaging blocks: all of it is exposed
        assert rank["comm_exposed_s"] == rank["comm_in_flight_s"]
        assert [b > 0 for b in rank["comm_bytes"]] == [(s + 1) % K == 0 for s in range(STEPS)]


@pytest.mark.slow
def test_efficiency_is_measured_speed_over_one_process_times_p(measured: tuple) -> None:
    rows = _rows(measured[0])
    one = rows[(1, "1 process")]["clips_per_s"]
    for (procs, _), row in rows.items():
        assert row["clips_per_s"] == pytest.approx(procs * BATCH / row["step_s"])
        assert row["ideal_clips_per_s"] == pytest.approx(procs * one)
        assert row["speedup"] == pytest.approx(row["clips_per_s"] / one)
        assert row["efficiency"] == pytest.approx(row["clips_per_s"] / (procs * one))
    assert rows[(1, "1 process")]["efficiency"] == 1.0


def _bytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.slow
def test_bytes_per_step_are_the_models_gradients_and_half_in_bf16(measured: tuple) -> None:
    rows = _rows(measured[0])
    model = build_model(ModelConfig(name=MODEL, num_classes=400))
    params = [p for p in model.parameters() if p.requires_grad]
    assert rows[(2, "ddp")]["grad_bytes"] == _bytes(params)
    assert rows[(2, "ddp")]["comm_bytes_per_step"] == _bytes(params)
    assert rows[(2, "ddp+bf16")]["comm_bytes_per_step"] == _bytes(params) / 2
    # AAVG averages weights, SGD momentum and BN statistics (Alg. 2) once every K steps.
    bn = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    stats = [t for m in bn for t in (m.running_mean, m.running_var) if t is not None]
    averaged = 2 * _bytes(params) + _bytes(stats)
    assert rows[(2, "aavg k=2")]["comm_bytes_per_step"] == averaged / K


@pytest.mark.slow
def test_under_a_users_torchrun_the_baseline_gives_rows_and_arithmetic(
    measured: tuple, tmp_path: Path
) -> None:
    """A world the user launched measures its size only; `--baseline` adds the earlier run's
    one-process rows, and its fast-path settings are reused (no probe in the world)."""
    report, _, out = measured
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "vidscale", "bench", "scaling", "--models", MODEL, "--frames", "8", "--size",
        "32", "--batch", str(BATCH), "--steps", str(STEPS), "--warmup", "1", "--threads", "1",
        "--hooks", "none", "--strategies", "ddp", "--baseline", str(out / "scaling.json"),
        "--out-json", str(tmp_path / "world.json"), "--plot", str(tmp_path / "world.png"),
    ]  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    world = json.loads((tmp_path / "world.json").read_text())
    assert world["settings"]["fast_settings"] == report["settings"]["fast_settings"]
    assert "auto chose" not in done.stdout  # nothing probed: the baseline's setting
    assert list(_rows(world)) == [(1, "1 process"), (2, "ddp")]
    assert _rows(world)[(1, "1 process")]["ranks"] == _rows(report)[(1, "1 process")]["ranks"]
    assert {r["fast_path"] for r in world["runs"]} == {r["fast_path"] for r in report["runs"]}


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--models", "no_such_model"], "--models"),
        (["--nproc", "0"], "--nproc"),
        (["--steps", "0"], "--steps"),
        (["--batch", "0"], "--batch"),
        (["--size", "8"], "--size"),
        (["--hooks", "zip"], "--hooks"),
        (["--strategies", "aavg", "--aavg-k", "3", "--steps", "4"], "--steps"),
        (["--hooks", "powersgd", "--warmup", "1"], "--warmup"),
        (["--models", MODEL, "--batch", "1", "--frames", "1", "--size", "32"], "--models"),
        (["--models", MODEL, "--size", "32", "--fast-path", "tsn_resnet18=fp32"], "--fast-path"),
        (["--models", MODEL, "--size", "32", "--fast-path", f"{MODEL}=fp16"], "--fast-path"),
        (["--models", MODEL, "--size", "32", "--fast-path", f"bf16,{MODEL}=fp32"], "--fast-path"),
    ],
)
def test_bad_arguments_give_one_line_naming_the_option(
    args: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ["--out-json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png")]
    assert _status(["bench", "scaling", *args, *out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vidscale: error:") and flag in err and "\n" not in err
    assert not (tmp_path / "s.json").exists()


def _status(argv: list[str]) -> int | str | None:
    """`main`'s exit status, whether it returns it or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


def test_no_cuda_device_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device")
    assert _status(["bench", "scaling", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device cuda" in err


def test_more_processes_than_gpus_names_nproc() -> None:
    check_procs((1, 2), device_type="cuda", devices=2)
    check_procs((1, 8), device_type="cpu", devices=0)  # CPU processes share the cores
    with pytest.raises(ConfigError, match="--nproc: 4 processes but this host has 2 CUDA"):
        check_procs((1, 4), device_type="cuda", devices=2)


def test_under_torchrun_the_world_size_is_measured() -> None:
    cfg = ScalingConfig(models=(MODEL,), size=32, device="cpu")
    assert resolve(cfg, world=3).procs == (3,)
    with pytest.raises(ConfigError, match="--nproc: under torchrun the world size"):
        resolve(ScalingConfig(models=(MODEL,), size=32, procs=(1, 2), device="cpu"), world=2)


WRONG_MODEL = "test_wrong_in_bf16"


class _NanInBf16(torch.autograd.Function):
    """Identity; its backward is NaN where the forward ran under bf16 autocast (a wrong bf16
    kernel of the kind that once left every I3D step skipped)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.wrong = torch.is_autocast_enabled("cpu")
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("nan") if ctx.wrong else grad


class _TinyNanInBf16(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        return self.head(_NanInBf16.apply(self.conv(clips)).relu().mean((2, 3, 4)))


def _wrong_in_bf16(cfg: ModelConfig) -> nn.Module:
    return _TinyNanInBf16()


def measure_a_model_that_trains_nothing_in_bf16(env: Any) -> str:
    """Both ranks measure, in bf16, a model whose every bf16 gradient is NaN: every measured step
    is skipped. Returns each rank's refusal."""
    from vidscale.bench.scaling.worker import measure_world
    from vidscale.models import registry
    from vidscale.step.applied import NothingTrained

    registry.MODELS[WRONG_MODEL] = _wrong_in_bf16
    cfg = ScalingConfig(
        models=(WRONG_MODEL,),
        procs=(2,),
        steps=2,
        warmup=1,
        batch=2,
        frames=2,
        size=16,
        num_classes=4,
        threads=1,
        hooks=("none",),
        strategies=("aavg",),
        aavg_k=2,
        device="cpu",
        fast_settings=(f"{WRONG_MODEL}=bf16",),
    )
    try:
        measure_world(cfg)
    except NothingTrained as err:
        return str(err)
    return "measured"


@pytest.mark.slow
def test_a_row_none_of_whose_steps_applied_is_refused_on_every_rank() -> None:
    from tests.distributed.multiproc import run_ranks

    lines = run_ranks(measure_a_model_that_trains_nothing_in_bf16, 2)
    assert (
        lines[0]
        == lines[1]
        == (
            f"{WRONG_MODEL} aavg k=2 at bf16, 2 process(es): none of its 2 measured steps applied an "
            "update (first not finite: the gradient of conv.weight), so its times are of steps "
            "that train nothing; not recorded"
        )
    )
