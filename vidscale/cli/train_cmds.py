"""`vidscale train`: its parser and command."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vidscale.cli.args import _add_config_args, resolve_config
from vidscale.cli.output import add_json_flag, print_json, progress_to_stderr


def cmd_train(args: argparse.Namespace) -> int:
    from vidscale.train.loop import train

    cfg = resolve_config(args, run_dir=args.out)
    with progress_to_stderr(args.json):
        summary = train(cfg, run_dir=args.out, resume=args.resume)
    if not summary:  # a rank other than 0 reports nothing
        return 0
    shown = {k: v for k, v in summary.items() if k != "skipped"}
    if args.json:
        print_json(shown)
    elif args.print_summary:
        print(format_summary(shown))
    return 0


def format_summary(summary: dict[str, Any]) -> str:
    """One `name: value` line per field of summary.json; lists and tables as their length."""
    width = max(len(k) for k in summary)
    lines = []
    for key, value in summary.items():
        if isinstance(value, float):
            text = f"{value:.4g}"
        elif isinstance(value, list | dict):
            text = f"({len(value)} entries; see summary.json)"
        else:
            text = str(value)
        lines.append(f"{key:{width}s}  {text}")
    return "\n".join(lines)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `train` sub-command."""
    p = sub.add_parser("train", help="train (one process, or every rank under torchrun)")
    _add_config_args(p)
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="train the run a JSON config describes instead of a recipe: a run's RUN/config.json "
        "or `vidscale recipes NAME --json > FILE`; --data and --set apply on top",
    )
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
    p.add_argument(
        "--print-summary", action="store_true", help="print the run's summary at the end"
    )
    add_json_flag(p)
    p.set_defaults(fn=cmd_train)
