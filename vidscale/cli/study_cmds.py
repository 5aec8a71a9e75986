"""`vidscale study NAME`: the studies (`batch-size`, `aavg`, `multigrid`, `two-stream`,
`multilabel`), their parsers and commands; the earlier top-level names (`sweep`, `aavg-study`,
...) are aliases for one release. Every study takes the same flags for where and how its runs
train (`add_study_args`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from vidscale.cli.args import _at_least, _weights, _with_data_root
from vidscale.cli.flags import add_renamed
from vidscale.cli.output import add_json_flag, print_json_file, progress_to_stderr
from vidscale.config import ConfigError

DEMO_RECIPE = "demo_tsm_r18_8f_b32_e20"


def add_study_args(
    p: argparse.ArgumentParser,
    *,
    report: str,
    nproc: int,
    epochs: int | None,
    recipe: bool = True,
    data_help: str = "dataset directory (sets data.root)",
) -> None:
    """The flags every study shares: --recipe (where the study has one), --data, --out,
    --epochs, --nproc, --set, --plot-only and --json. `report` names the files --plot-only
    rebuilds; `epochs` None keeps the recipe's."""
    if recipe:
        p.add_argument(
            "--recipe",
            default=DEMO_RECIPE,
            help=f"named recipe every run starts from ({DEMO_RECIPE})",
        )
    p.add_argument("--data", type=Path, required=not recipe, help=data_help)
    p.add_argument("--out", type=Path, required=True, help="study directory, one run per subdir")
    p.add_argument(
        "--epochs",
        type=_at_least(1),
        default=epochs,
        help="epochs of every run" + (f" ({epochs})" if epochs else " (default: the recipe's)"),
    )
    p.add_argument("--nproc", type=_at_least(1), default=nproc, help="processes (torchrun if > 1)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field of every run (repeatable)",
    )
    p.add_argument("--plot-only", action="store_true", help=f"rebuild {report} from finished runs")
    add_json_flag(p)


def _list(flag: str, text: str, cast: type) -> tuple:
    from vidscale.studies.runs import parse_list

    try:
        return parse_list(text, cast)
    except ConfigError as err:
        raise ConfigError(f"{flag}: {err}") from err


def _run(args: argparse.Namespace, study: Callable[[], object], *, report: Path) -> int:
    """Run `study`; with --json, its progress on stderr and its `report` file on stdout."""
    with progress_to_stderr(args.json):
        study()
    if args.json:
        print_json_file(report)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from vidscale.studies.sweep import SweepSpec, sweep

    spec = SweepSpec(
        recipe=args.recipe,
        out=args.out,
        overrides=_with_data_root(args),
        batches=_list("--batches", args.batches, int),
        optimizers=_list("--optimizers", args.optimizers, str),
        epochs=args.epochs,
        nproc=args.nproc,
    )
    return _run(args, lambda: sweep(spec, plot_only=args.plot_only), report=spec.out / "sweep.json")


def cmd_aavg_study(args: argparse.Namespace) -> int:
    from vidscale.studies.aavg import StudySpec, aavg_study

    spec = StudySpec(
        recipe=args.recipe,
        out=args.out,
        overrides=_with_data_root(args),
        ks=_list("--aavg-k", args.aavg_k, int),
        epochs=args.epochs,
        nproc=args.nproc,
    )
    return _run(
        args, lambda: aavg_study(spec, plot_only=args.plot_only), report=spec.out / "study.json"
    )


def cmd_multigrid_study(args: argparse.Namespace) -> int:
    from vidscale.studies.multigrid import MultigridStudySpec, multigrid_study

    spec = MultigridStudySpec(
        recipe=args.recipe,
        out=args.out,
        overrides=_with_data_root(args),
        epochs=args.epochs,
        nproc=args.nproc,
        margin=args.margin,
        variants=_list("--variants", args.variants, str),
        seeds=_list("--seeds", args.seeds, int),
    )
    return _run(
        args,
        lambda: multigrid_study(spec, plot_only=args.plot_only),
        report=spec.out / "study.json",
    )


def cmd_two_stream_study(args: argparse.Namespace) -> int:
    from vidscale.studies.two_stream import TwoStreamStudySpec, two_stream_study

    spec = TwoStreamStudySpec(
        data=args.data,
        out=args.out,
        overrides=tuple(args.overrides),
        epochs=args.epochs,
        nproc=args.nproc,
        weights=args.weights,
        margin=args.margin,
    )
    return _run(
        args,
        lambda: two_stream_study(spec, plot_only=args.plot_only),
        report=spec.out / "study.json",
    )


def cmd_multilabel_study(args: argparse.Namespace) -> int:
    from vidscale.studies.multilabel import MultiLabelStudySpec, multilabel_study

    spec = MultiLabelStudySpec(
        data=args.data,
        out=args.out,
        overrides=tuple(args.overrides),
        epochs=args.epochs,
        nproc=args.nproc,
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
    add_study_args(p, report="sweep.json/png", nproc=1, epochs=10)
    p.add_argument("--batches", default="32,128,768", help="global batches (accumulation)")
    p.add_argument("--optimizers", default="sgd,lars,lamb", help="comma-separated (sgd,lars,lamb)")
    p.set_defaults(fn=cmd_sweep)


def _add_aavg(p: argparse.ArgumentParser) -> None:
    add_study_args(p, report="study.json/png", nproc=2, epochs=10)
    p.add_argument(
        "--aavg-k",
        default="1,2,4,8,-1",
        help="AAVG's steps per averaging, one run each (-1: once per epoch)",
    )
    add_renamed(p, "--ks", "--aavg-k")
    p.set_defaults(fn=cmd_aavg_study)


def _add_multigrid(p: argparse.ArgumentParser) -> None:
    add_study_args(p, report="study.json/png", nproc=2, epochs=None)
    p.add_argument(
        "--margin", type=float, default=1.0, help="points below the baseline's final accuracy"
    )
    p.add_argument(
        "--variants",
        default="baseline,long,short,both",
        help="which runs (comma-separated; the baseline is always one)",
    )
    p.add_argument(
        "--seeds",
        default="",
        help="e.g. 0,1,2: every variant once per seed (OUT/seed-N/...), reported as mean and sd",
    )
    p.set_defaults(fn=cmd_multigrid_study)


def _add_two_stream(p: argparse.ArgumentParser) -> None:
    add_study_args(
        p,
        report="study.json/png",
        nproc=2,
        epochs=None,
        recipe=False,
        data_help="prepared dir with PREP/flow (sets data.root)",
    )
    p.add_argument("--weights", type=_weights, default=(1.0, 1.0), help="fusion RGB,FLOW (1,1)")
    p.add_argument(
        "--margin", type=float, default=1.0, help="points below flow_scratch's best accuracy"
    )
    p.set_defaults(fn=cmd_two_stream_study)


def _add_multilabel(p: argparse.ArgumentParser) -> None:
    add_study_args(
        p,
        report="study.json/png",
        nproc=2,
        epochs=None,
        recipe=False,
        data_help="multi-label demo directory (vidscale synth --multi-label; sets data.root)",
    )
    p.set_defaults(fn=cmd_multilabel_study)
