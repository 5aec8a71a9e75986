"""`vidscale study NAME`: the studies (`batch-size`, `aavg`, `multigrid`, `two-stream`,
`multilabel`), their parsers and commands; the earlier top-level names (`sweep`, `aavg-study`,
...) are aliases for one release. Every study takes the same flags for where its runs start and
go (`add_study_args`); its other flags are its spec's fields (`studies.options`, derived by
`cli.flags`: `--epochs`, `--nproc` and the study's own)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from vidscale.cli.args import _with_data_root
from vidscale.cli.flags import add_config_flags, add_renamed, config_from_args
from vidscale.cli.output import add_json_flag, print_json_file, progress_to_stderr

DEMO_RECIPE = "demo_tsm_r18_8f_b32_e12"

S = TypeVar("S")


def add_study_args(
    p: argparse.ArgumentParser,
    spec: type,
    *,
    report: str,
    recipe: bool = True,
    data_help: str = "dataset directory (sets data.root)",
) -> None:
    """The flags every study shares: --recipe (where the study has one), --data, --out, --set,
    --plot-only and --json; then one flag per field of the study's `spec` dataclass but those
    (`cli.flags.add_config_flags`). `report` names the files --plot-only rebuilds."""
    if recipe:
        p.add_argument(
            "--recipe",
            default=DEMO_RECIPE,
            help=f"named recipe every run starts from ({DEMO_RECIPE})",
        )
    p.add_argument("--data", type=Path, required=not recipe, help=data_help)
    p.add_argument("--out", type=Path, required=True, help="study directory, one run per subdir")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field of every run (repeatable)",
    )
    add_config_flags(p, spec, skip=_not_derived(spec))
    p.add_argument("--plot-only", action="store_true", help=f"rebuild {report} from finished runs")
    add_json_flag(p)


SHARED = ("recipe", "data", "out", "overrides")  # set by add_study_args's own flags
# Spec fields a study fixes for its own reasons, not flags: Adam's rate and the largest
# per-learner batch of the AAVG study's adaptive runs.
UNFLAGGED = ("adam_lr", "max_batch")


def _not_derived(spec: type) -> tuple[str, ...]:
    """The fields of `spec` set by the shared flags, and those it keeps off the command line."""
    names = {f.name for f in dataclasses.fields(spec)}
    return tuple(name for name in (*SHARED, *UNFLAGGED) if name in names)


def _spec(spec: type[S], args: argparse.Namespace, **shared: object) -> S:
    """`spec` from the shared flags (`shared`: recipe, out, overrides, data as the study has
    them) and the flags derived from its fields, checked (`InputError` naming the flag)."""
    return config_from_args(spec, args, skip=_not_derived(spec), base=spec(**shared))


def _run(args: argparse.Namespace, study: Callable[[], object], *, report: Path) -> int:
    """Run `study`; with --json, its progress on stderr and its `report` file on stdout."""
    with progress_to_stderr(args.json):
        study()
    if args.json:
        print_json_file(report)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from vidscale.studies.sweep import SweepSpec, sweep

    spec = _spec(SweepSpec, args, recipe=args.recipe, out=args.out, overrides=_with_data_root(args))
    return _run(args, lambda: sweep(spec, plot_only=args.plot_only), report=spec.out / "sweep.json")


def cmd_aavg_study(args: argparse.Namespace) -> int:
    from vidscale.studies.aavg import StudySpec, aavg_study

    spec = _spec(StudySpec, args, recipe=args.recipe, out=args.out, overrides=_with_data_root(args))
    return _run(
        args, lambda: aavg_study(spec, plot_only=args.plot_only), report=spec.out / "study.json"
    )


def cmd_multigrid_study(args: argparse.Namespace) -> int:
    from vidscale.studies.multigrid import MultigridStudySpec, multigrid_study

    spec = _spec(
        MultigridStudySpec,
        args,
        recipe=args.recipe,
        out=args.out,
        overrides=_with_data_root(args),
    )
    return _run(
        args,
        lambda: multigrid_study(spec, plot_only=args.plot_only),
        report=spec.out / "study.json",
    )


def cmd_two_stream_study(args: argparse.Namespace) -> int:
    from vidscale.studies.two_stream import TwoStreamStudySpec, two_stream_study

    spec = _spec(
        TwoStreamStudySpec, args, data=args.data, out=args.out, overrides=tuple(args.overrides)
    )
    return _run(
        args,
        lambda: two_stream_study(spec, plot_only=args.plot_only),
        report=spec.out / "study.json",
    )


def cmd_multilabel_study(args: argparse.Namespace) -> int:
    from vidscale.studies.multilabel import MultiLabelStudySpec, multilabel_study

    spec = _spec(
        MultiLabelStudySpec, args, data=args.data, out=args.out, overrides=tuple(args.overrides)
    )
    return _run(
        args,
        lambda: multilabel_study(spec, plot_only=args.plot_only),
        report=spec.out / "study.json",
    )


# (the name under `vidscale study`, the top-level name of earlier releases, kept as an alias)
STUDIES = (
    ("batch-size", "sweep"),
    ("aavg", "aavg-study"),
    ("multigrid", "multigrid-study"),
    ("two-stream", "two-stream-study"),
    ("multilabel", "multilabel-study"),
)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`vidscale study NAME`, and each study's earlier top-level name as a hidden alias that
    says its new name (kept for one release)."""
    study = sub.add_parser("study", help="the papers' studies: runs that launch runs, one report")
    study_sub = study.add_subparsers(dest="study", required=True, metavar="STUDY")
    adders = {
        "batch-size": _add_batch_size,
        "aavg": _add_aavg,
        "multigrid": _add_multigrid,
        "two-stream": _add_two_stream,
        "multilabel": _add_multilabel,
    }
    for name, old in STUDIES:
        adders[name](study_sub.add_parser(name, help=STUDY_HELP[name]))
        alias = sub.add_parser(old)  # no help: left out of `vidscale --help`
        adders[name](alias)
        alias.set_defaults(fn=_renamed(alias.get_default("fn"), old=old, new=name))


STUDY_HELP = {
    "batch-size": "val top-1 vs global batch per optimizer (SGD, LARS, LAMB)",
    "aavg": "AAVG K study: accuracy, time and bytes vs averaging interval K",
    "multigrid": "baseline vs multigrid (long, short, both): time to accuracy",
    "two-stream": "flow stream from scratch vs from the RGB run (AAVG §V): epochs to best, fusion",
    "multilabel": "TSM vs TSN on the multi-label demo: val mAP against chance",
}


def _renamed(
    fn: Callable[[argparse.Namespace], int], *, old: str, new: str
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        print(
            f"vidscale: note: `vidscale {old}` is now `vidscale study {new}`; the old name "
            "goes in the next release",
            file=sys.stderr,
        )
        return fn(args)

    return run


def _add_batch_size(p: argparse.ArgumentParser) -> None:
    from vidscale.studies.sweep import SweepSpec

    add_study_args(p, SweepSpec, report="sweep.json/png")
    p.set_defaults(fn=cmd_sweep)


def _add_aavg(p: argparse.ArgumentParser) -> None:
    from vidscale.studies.aavg import StudySpec

    add_study_args(p, StudySpec, report="study.json/png")
    add_renamed(p, "--ks", "--aavg-k")
    p.set_defaults(fn=cmd_aavg_study)


def _add_multigrid(p: argparse.ArgumentParser) -> None:
    from vidscale.studies.multigrid import MultigridStudySpec

    add_study_args(p, MultigridStudySpec, report="study.json/png")
    p.set_defaults(fn=cmd_multigrid_study)


def _add_two_stream(p: argparse.ArgumentParser) -> None:
    from vidscale.studies.two_stream import TwoStreamStudySpec

    add_study_args(
        p,
        TwoStreamStudySpec,
        report="study.json/png",
        recipe=False,
        data_help="prepared dir with PREP/flow (sets data.root)",
    )
    p.set_defaults(fn=cmd_two_stream_study)


def _add_multilabel(p: argparse.ArgumentParser) -> None:
    from vidscale.studies.multilabel import MultiLabelStudySpec

    add_study_args(
        p,
        MultiLabelStudySpec,
        report="study.json/png",
        recipe=False,
        data_help="multi-label demo directory (vidscale synth --multi-label; sets data.root)",
    )
    p.set_defaults(fn=cmd_multilabel_study)
