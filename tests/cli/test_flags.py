"""Each bench's flags are its config's fields, and each study's its spec's (`cli.flags`,
`bench.options`, `studies.options`): one flag per field with the field's default and help, a bad value refused in one line naming the flag, each
retired spelling refused naming its successor, and a `ValueError` from inside a bench run left
a bug (its traceback), never passed off as bad input."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from vidscale.bench.cluster.config import ClusterConfig
from vidscale.bench.compute.models import BenchConfig, ModelsConfig
from vidscale.bench.compute.profile import ProfileConfig
from vidscale.bench.compute.throughput import ThroughputConfig
from vidscale.bench.data.bench_videos import BenchVideoSpec
from vidscale.bench.data.data_wait import DataWaitConfig
from vidscale.bench.data.dataload import DataConfig
from vidscale.bench.data.flow import FlowConfig
from vidscale.bench.data.shard_train import ShardTrainConfig
from vidscale.bench.gpu_report import GpuReportConfig
from vidscale.bench.multigrid import MultigridBenchConfig
from vidscale.bench.network.config import NetworkConfig
from vidscale.bench.options import HELP, check_options, flag_name
from vidscale.bench.scaling.config import ScalingConfig
from vidscale.cli import (
    bench_cmds,
    bench_gpu_cmds,
    bench_network_cmd,
    build_parser,
    main,
    study_cmds,
)
from vidscale.cli.flags import config_fields, config_from_args, format_default
from vidscale.cli.plan_cmd import PlanOptions
from vidscale.errors import InputError
from vidscale.studies.aavg import StudySpec
from vidscale.studies.multigrid import MultigridStudySpec
from vidscale.studies.multilabel import MultiLabelStudySpec
from vidscale.studies.sweep import SweepSpec
from vidscale.studies.two_stream import TwoStreamStudySpec

# (bench command, config, the fields it sets another way than by a derived flag)
DERIVED = [
    ("data", DataConfig, bench_cmds.DATA_SKIP),
    ("data", BenchVideoSpec, bench_cmds.VIDEOS_SKIP),
    ("data-wait", DataWaitConfig, ()),
    ("models", BenchConfig, bench_cmds.MODELS_SKIP),
    ("models", ModelsConfig, ("models", "settings")),
    ("flow", FlowConfig, bench_cmds.FLOW_SKIP),
    ("scaling", ScalingConfig, bench_cmds.SCALING_SKIP),
    ("network", NetworkConfig, bench_network_cmd.SKIP),
    ("cluster", ClusterConfig, ()),
    ("multigrid", MultigridBenchConfig, ()),
    ("throughput", ThroughputConfig, bench_gpu_cmds.THROUGHPUT_SKIP),
    ("shard-train", ShardTrainConfig, bench_gpu_cmds.SHARD_TRAIN_SKIP),
    ("profile", ProfileConfig, bench_gpu_cmds.PROFILE_SKIP),
    ("gpu-report", GpuReportConfig, bench_gpu_cmds.GPU_REPORT_SKIP),
]


# (study command, its spec)
STUDIES = [
    ("batch-size", SweepSpec),
    ("aavg", StudySpec),
    ("multigrid", MultigridStudySpec),
    ("two-stream", TwoStreamStudySpec),
    ("multilabel", MultiLabelStudySpec),
]


def bench_parser(name: str, group: str = "bench") -> argparse.ArgumentParser:
    (top,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    (sub,) = (a for a in top.choices[group]._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


def default_of(f: dataclasses.Field[object]) -> object:
    return f.default if f.default is not dataclasses.MISSING else None


@pytest.mark.parametrize(
    ("command", "cls", "skip"), DERIVED, ids=lambda x: getattr(x, "__name__", x)
)
def test_every_field_is_a_flag_with_its_default_and_help(
    command: str, cls: type, skip: tuple[str, ...]
) -> None:
    check_derived(bench_parser(command), cls, skip)


@pytest.mark.parametrize(("command", "spec"), STUDIES, ids=[c for c, _ in STUDIES])
def test_every_study_setting_is_a_flag_from_its_spec(command: str, spec: type) -> None:
    """Every field of the spec but the shared flags' (and the AAVG study's fixed Adam rate and
    batch cap) is a derived flag; given none, the spec is its defaults."""
    skip = study_cmds._not_derived(spec)
    assert set(skip) <= {*study_cmds.SHARED, *study_cmds.UNFLAGGED}
    parser = bench_parser(command, group="study")
    check_derived(parser, spec, skip)
    args = parser.parse_args(["--out", "o", "--data", "d"])
    shared = {name: getattr(args, name) for name in skip if name in study_cmds.SHARED}
    defaults = spec(**shared)
    built: object = study_cmds._spec(spec, args, **shared)
    assert built == defaults


def test_plans_flags_are_its_options_fields() -> None:
    """`vidscale plan`'s run is `PlanOptions`'s fields; given none, the options' defaults."""
    (top,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = top.choices["plan"]
    check_derived(parser, PlanOptions, ())
    assert config_from_args(PlanOptions, parser.parse_args([])) == PlanOptions()
    args = parser.parse_args(["--world-size", "48,384", "--epoch-clips", "1000"])
    opts = config_from_args(PlanOptions, args)
    assert (opts.world_size, opts.epoch_clips) == ((48, 384), 1000)
    assert opts.request(48).clips == 1000


def check_derived(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...]) -> None:
    actions = {a.dest: a for a in parser._actions}
    for f in config_fields(cls, skip=skip):
        action = actions.get(f.name)
        assert action is not None, f"{parser.prog}: {cls.__name__}.{f.name} has no flag"
        assert action.option_strings == [flag_name(f)]
        assert action.default is None  # "the config's": the flag not given keeps it
        assert action.help is not None and action.help.startswith(f.metadata[HELP])
        default = default_of(f)
        if default not in (None, False, (), ""):
            assert action.help.endswith(f"({format_default(default)})"), action.help


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["bench", "throughput", "--steps", "0"], "--steps: must be >= 1, got 0"),
        (["bench", "profile", "tsm_resnet18", "--topk", "0"], "--topk: must be >= 1, got 0"),
        (["bench", "network", "--warmup", "1"], "--warmup: must be >= 2, got 1"),
        (["bench", "scaling", "--bucket-cap-mb", "0"], "--bucket-cap-mb: must be > 0, got 0.0"),
        (["bench", "scaling", "--nproc", "1,0"], "--nproc: must be >= 1, got 0"),
        (["bench", "data-wait", "--workers", "0,-1"], "--workers: must be >= 0, got -1"),
        (["bench", "multigrid", "demo_tsm_r18_8f_b32_e12", "--repeats", "0"], "--repeats"),
        (["bench", "models", "--quick", "--settle", "-1"], "--settle: must be >= 0, got -1"),
        (["bench", "data", "--count", "0"], "--count: must be >= 1, got 0"),
        (["plan", "--epochs", "0"], "--epochs: must be > 0, got 0.0"),
        (["plan", "--latency-us", "-1"], "--latency-us: must be >= 0, got -1.0"),
        (["study", "aavg", "--out", "o", "--nproc", "0"], "--nproc: must be >= 1, got 0"),
        (
            ["study", "multigrid", "--out", "o", "--margin", "-1"],
            "--margin: must be >= 0, got -1.0",
        ),
        (
            ["study", "two-stream", "--data", "d", "--out", "o", "--weights", "1,-1"],
            "--weights: must be >= 0, got -1.0",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"vidscale: error: {line}\n" or (line in err and err.count("\n") == 1), err


@pytest.mark.parametrize(
    ("argv", "new"),
    [
        (["bench", "profile", "tsm_resnet18", "--top", "5"], "--topk"),
        (["plan", "--clips", "1000"], "--epoch-clips"),
        (["plan", "--bucket-mb", "25"], "--bucket-cap-mb"),
        (["study", "aavg", "--out", "x", "--ks", "1,2"], "--aavg-k"),
    ],
)
def test_a_retired_spelling_names_its_successor(
    argv: list[str], new: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"{argv[-2]} is now {new}" in err and err.count("\n") == 1, err


def test_the_new_spellings_set_what_the_old_did(tmp_path: Path) -> None:
    args = build_parser().parse_args(["plan", "--epoch-clips", "1000", "--bucket-cap-mb", "5"])
    assert (args.epoch_clips, args.bucket_cap_mb) == (1000, 5.0)
    args = build_parser().parse_args(["bench", "profile", "tsm_resnet18", "--topk", "3"])
    assert args.top == 3


def test_checks_name_the_flag_for_library_callers_too() -> None:
    with pytest.raises(InputError, match=r"^--fast-path: expected one of"):
        check_options(ThroughputConfig(setting="fp16"))
    with pytest.raises(InputError, match=r"^--max-batch: must be >= --batch \(8\), got 4"):
        ThroughputConfig(fill=True, max_batch=4).validate()
    with pytest.raises(InputError, match=r"^--variants: expected one of"):
        MultigridBenchConfig(variants=("baseline",)).validate()


def test_a_value_error_inside_a_bench_run_is_a_bug_not_bad_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The run is reached (the flags are fine), and what it raises keeps its traceback."""
    from vidscale.bench.compute import profile, throughput
    from vidscale.bench.data import shard_train

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("an internal check failed")

    monkeypatch.setattr(throughput, "run", broken)
    monkeypatch.setattr(profile, "run", broken)
    monkeypatch.setattr(shard_train, "run", broken)
    out = str(tmp_path / "t.json")
    for argv in (
        ["bench", "throughput", "tsm_resnet18", "--device", "cpu", "--out-json", out],
        ["bench", "profile", "tsm_resnet18", "--device", "cpu", "--out-json", out],
        ["bench", "shard-train", str(tmp_path), "--device", "cpu", "--out-json", out],
    ):
        with pytest.raises(ValueError, match="an internal check failed") as raised:
            main(argv)
        assert not isinstance(raised.value, InputError)
