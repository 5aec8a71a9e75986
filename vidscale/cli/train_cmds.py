"""`vidscale train`, `sweep` and the studies (`aavg-study`, `multigrid-study`,
`two-stream-study`): their parsers and commands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vidscale.cli.args import _add_config_args, _at_least, _weights, _with_data_root, resolve_config
from vidscale.config import ConfigError


def cmd_train(args: argparse.Namespace) -> int:
    from vidscale.train.loop import train

    cfg = resolve_config(args, run_dir=args.out)
    summary = train(cfg, run_dir=args.out, resume=args.resume)
    if summary and args.print_summary:
        print(json.dumps({k: v for k, v in summary.items() if k != "skipped"}, indent=2))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from vidscale.studies.sweep import SweepSpec, parse_list, sweep

    try:
        batches = parse_list(args.batches, int)
    except ConfigError as err:
        raise ConfigError(f"--batches: {err}") from err
    spec = SweepSpec(
        recipe=args.recipe,
        out=args.out,
        overrides=_with_data_root(args),
        batches=batches,
        optimizers=parse_list(args.optimizers, str),
        epochs=args.epochs,
        nproc=args.nproc,
    )
    sweep(spec, plot_only=args.plot_only)
    return 0


def cmd_aavg_study(args: argparse.Namespace) -> int:
    from vidscale.studies.aavg import StudySpec, aavg_study
    from vidscale.studies.sweep import parse_list

    try:
        ks = parse_list(args.ks, int)
    except ConfigError as err:
        raise ConfigError(f"--ks: {err}") from err
    spec = StudySpec(
        recipe=args.recipe,
        out=args.out,
        overrides=_with_data_root(args),
        ks=ks,
        epochs=args.epochs,
        nproc=args.nproc,
    )
    aavg_study(spec, plot_only=args.plot_only)
    return 0


def cmd_multigrid_study(args: argparse.Namespace) -> int:
    from vidscale.studies.multigrid import MultigridStudySpec, multigrid_study
    from vidscale.studies.sweep import parse_list

    spec = MultigridStudySpec(
        recipe=args.recipe,
        out=args.out,
        overrides=_with_data_root(args),
        nproc=args.nproc,
        margin=args.margin,
        variants=parse_list(args.variants, str),
        seeds=parse_list(args.seeds, int) if args.seeds else (),
    )
    multigrid_study(spec, plot_only=args.plot_only)
    return 0


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
    two_stream_study(spec, plot_only=args.plot_only)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `train`, `sweep` and study sub-commands, in `vidscale --help` order."""
    p = sub.add_parser("train", help="train (one process, or every rank under torchrun)")
    _add_config_args(p)
    p.add_argument("--out", type=Path, required=True, help="run directory")
    p.add_argument(
        "--resume",
        nargs="?",
        choices=["auto", "never", "must"],
        default="auto",
        const="auto",
        help="auto (default, or --resume alone): continue OUT from its newest loadable "
        "checkpoint if it has one; never: refuse a non-empty OUT; must: fail without one",
    )
    p.add_argument("--print-summary", action="store_true", help="print summary.json at the end")
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("sweep", help="batch-size study: val top-1 vs global batch per optimizer")
    p.add_argument("--recipe", default="demo_tsm_r18_8f_b32_e20")
    p.add_argument("--data", type=Path, help="dataset directory (sets data.root)")
    p.add_argument("--out", type=Path, required=True, help="sweep directory, one run per subdir")
    p.add_argument("--batches", default="32,128,768", help="global batches (accumulation)")
    p.add_argument("--optimizers", default="sgd,lars,lamb")
    p.add_argument("--epochs", type=_at_least(1), default=10, help="epochs of every run")
    p.add_argument("--nproc", type=_at_least(1), default=1, help=">1: each run under torchrun")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--plot-only", action="store_true", help="rebuild sweep.json/png from runs")
    p.set_defaults(fn=cmd_sweep)

    p = sub.add_parser(
        "aavg-study", help="AAVG K study: accuracy, time and bytes vs averaging interval K"
    )
    p.add_argument("--recipe", default="demo_tsm_r18_8f_b32_e20")
    p.add_argument("--data", type=Path, help="dataset directory (sets data.root)")
    p.add_argument("--out", type=Path, required=True, help="study directory, one run per subdir")
    p.add_argument("--ks", default="1,2,4,8,-1", help="averaging intervals (-1: once per epoch)")
    p.add_argument("--epochs", type=_at_least(1), default=10, help="epochs of every run")
    p.add_argument("--nproc", type=_at_least(1), default=2, help="learners (torchrun if > 1)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--plot-only", action="store_true", help="rebuild study.json/png from runs")
    p.set_defaults(fn=cmd_aavg_study)

    p = sub.add_parser(
        "multigrid-study", help="baseline vs multigrid (long, short, both): time to accuracy"
    )
    p.add_argument("--recipe", default="demo_tsm_r18_8f_b32_e20")
    p.add_argument("--data", type=Path, help="dataset directory (sets data.root)")
    p.add_argument("--out", type=Path, required=True, help="study directory, one run per subdir")
    p.add_argument("--nproc", type=_at_least(1), default=2, help="processes (torchrun if > 1)")
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
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--plot-only", action="store_true", help="rebuild study.json/png from runs")
    p.set_defaults(fn=cmd_multigrid_study)

    p = sub.add_parser(
        "two-stream-study",
        help="flow stream from scratch vs from the RGB run (AAVG §V): epochs to best, fusion",
    )
    p.add_argument("--data", type=Path, required=True, help="prepared dir with PREP/flow")
    p.add_argument("--out", type=Path, required=True, help="study directory, one run per subdir")
    p.add_argument("--epochs", type=_at_least(1), default=None, help="default: the recipes'")
    p.add_argument("--nproc", type=_at_least(1), default=2, help="processes (torchrun if > 1)")
    p.add_argument("--weights", type=_weights, default=(1.0, 1.0), help="fusion RGB,FLOW (1,1)")
    p.add_argument(
        "--margin", type=float, default=1.0, help="points below flow_scratch's best accuracy"
    )
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--plot-only", action="store_true", help="rebuild study.json/png from runs")
    p.set_defaults(fn=cmd_two_stream_study)
