"""`vidscale import-weights`: a published checkpoint of another framework as a vidscale run."""

from __future__ import annotations

import argparse
from pathlib import Path

from vidscale.cli.args import _at_least
from vidscale.cli.output import add_json_flag, print_result
from vidscale.errors import InputError


def cmd_import_weights(args: argparse.Namespace) -> int:
    from vidscale.weights import import_weights

    if not args.src.is_file():
        raise InputError(f"SRC {args.src}: no such checkpoint file")
    if args.classes is not None and not args.classes.is_file():
        raise InputError(f"--classes {args.classes}: no such file")
    result = import_weights(
        args.src,
        fmt=args.format,
        model=args.model,
        out=args.out,
        classes_file=args.classes,
        num_classes=args.num_classes,
    )
    text = (
        f"wrote {result.run}: {result.model}, {result.num_classes} classes, {result.tensors} "
        f"tensors from {result.source}; evaluates {result.eval_views}"
    )
    print_result(result, as_json=args.json, text=text)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `import-weights` sub-command."""
    from vidscale.weights import FORMATS

    covered = "; ".join(f"{name}: {', '.join(form.SOURCES)}" for name, form in FORMATS.items())
    p = sub.add_parser(
        "import-weights",
        help="a published checkpoint as a run (predict, eval, export, init_from)",
        description="Write run directory RUN (config, classes, checkpoint) from checkpoint SRC "
        "of another framework, its keys mapped onto the vidscale model of the same network. "
        "Models by format: " + covered + ".",
    )
    p.add_argument(
        "src",
        type=Path,
        metavar="SRC",
        help="the checkpoint file (.pth, .pth.tar, .pyth, Caffe2 .pkl)",
    )
    p.add_argument("--format", choices=list(FORMATS), required=True, help="SRC's framework")
    p.add_argument("--model", required=True, metavar="NAME", help="the vidscale model")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--classes", type=Path, default=None, metavar="FILE", help="class names, one a line"
    )
    group.add_argument(
        "--num-classes",
        type=_at_least(1),
        default=None,
        metavar="K",
        help="names class_0..K-1 (default: the checkpoint's class count)",
    )
    p.add_argument("--out", type=Path, required=True, metavar="RUN", help="a new run directory")
    add_json_flag(p)
    p.set_defaults(fn=cmd_import_weights)
