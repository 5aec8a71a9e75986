"""`vidscale sweep` and the studies (`aavg-study`, `multigrid-study`, `two-stream-study`,
`multilabel-study`): their parsers and commands. Every study takes the same flags for where and
how its runs train (`add_study_args`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from vidscale.cli.args import _at_least, _weights, _with_data_root
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
        ks=_list("--ks", args.ks, int),
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `sweep` and study sub-commands, in `vidscale --help` order."""
    p = sub.add_parser("sweep", help="batch-size study: val top-1 vs global batch per optimizer")
    add_study_args(p, report="sweep.json/png", nproc=1, epochs=10)
    p.add_argument("--batches", default="32,128,768", help="global batches (accumulation)")
    p.add_argument("--optimizers", default="sgd,lars,lamb", help="comma-separated (sgd,lars,lamb)")
    p.set_defaults(fn=cmd_sweep)

    p = sub.add_parser(
        "aavg-study", help="AAVG K study: accuracy, time and bytes vs averaging interval K"
    )
    add_study_args(p, report="study.json/png", nproc=2, epochs=10)
    p.add_argument("--ks", default="1,2,4,8,-1", help="averaging intervals (-1: once per epoch)")
    p.set_defaults(fn=cmd_aavg_study)

    p = sub.add_parser(
        "multigrid-study", help="baseline vs multigrid (long, short, both): time to accuracy"
    )
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

    p = sub.add_parser(
        "two-stream-study",
        help="flow stream from scratch vs from the RGB run (AAVG §V): epochs to best, fusion",
    )
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

    p = sub.add_parser(
        "multilabel-study", help="TSM vs TSN on the multi-label demo: val mAP against chance"
    )
    add_study_args(
        p,
        report="study.json/png",
        nproc=2,
        epochs=None,
        recipe=False,
        data_help="multi-label demo directory (vidscale synth --multi-label; sets data.root)",
    )
    p.set_defaults(fn=cmd_multilabel_study)
