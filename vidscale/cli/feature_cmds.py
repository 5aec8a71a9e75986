"""`vidscale extract-features`: pooled trunk features of many videos from a run. Its parser and
command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vidscale.cli.args import _at_least, _check_device, _check_parent, add_precision_flag
from vidscale.cli.output import add_json_flag, print_result, progress_to_stderr
from vidscale.config import ConfigError

EPILOG = """\
FILE (.npz; numpy.load(FILE) needs no pickle), one row per readable video in listing order:
  features        float32 [videos, F]: the mean over the video's views
  clip_features   float32 [videos, views, F]: each view (clips x crops, clip-major)
  paths           absolute video paths;  labels  class index (-1: unknown);  splits
  classes         the dataset's class names;  unreadable_paths, unreadable_reasons
  meta            JSON string: run, checkpoint, model, views, the classifier replaced, precision
A feature is the input of the run's classifier: the pooled trunk output (TSN/TSM: averaged over
frames; I3D, SlowFast: global-pooled). Finished videos are kept in FILE.parts/ as they are done:
the same command after an interruption continues there. Under torchrun the ranks share the
videos; the result does not depend on their number.
"""


def cmd_extract_features(args: argparse.Namespace) -> int:
    from vidscale.features.extract import ExtractOptions, extract_features
    from vidscale.features.parts import parts_dir
    from vidscale.run.ref import checkpoint_path, locate

    try:
        run, checkpoint = locate(args.run)
        checkpoint = args.checkpoint or checkpoint
        checkpoint_path(run, checkpoint)
    except FileNotFoundError as err:
        raise ConfigError(f"RUN: {err}") from err
    if args.data is not None and args.videos:
        raise ConfigError("give --data DIR or VIDEO files, not both")
    if args.data is None and not args.videos:
        raise ConfigError("give --data DIR or VIDEO files")
    missing = [v for v in args.videos if not v.is_file()]
    if missing:
        raise ConfigError(f"VIDEO: {missing[0]} is not a file")
    if args.data is not None and not args.data.is_dir():
        raise ConfigError(f"--data: {args.data} is not a directory")
    if args.out.suffix != ".npz":
        raise ConfigError(f"--out: {args.out} must end in .npz")
    _check_parent("--out", args.out)
    if args.out.exists() and not parts_dir(args.out).exists() and not args.overwrite:
        raise ConfigError(f"--out: {args.out} exists (remove it, or pass --overwrite)")
    _check_device(args.device)
    opts = ExtractOptions(
        run=run,
        out=args.out,
        checkpoint=checkpoint,
        data=args.data,
        videos=tuple(args.videos),
        split=args.split,
        overrides=tuple(args.overrides),
        num_clips=args.clips,
        num_crops=args.crops,
        device=args.device,
        chunk=args.chunk,
        precision=args.precision,
        progress=sys.stderr.isatty(),
    )
    with progress_to_stderr(args.json):
        summary = extract_features(opts)
    if summary:  # rank 0 reports for the launch
        print_result(summary, as_json=args.json, text=format_summary(summary))
    return 0


def format_summary(summary: dict[str, object]) -> str:
    """The one-line summary, then one line per unreadable video."""
    unreadable = summary["unreadable"]
    assert isinstance(unreadable, list)
    line = (
        f"wrote {summary['out']}: {summary['videos']} videos x {summary['dim']} features "
        f"({summary['views']} views each); {len(unreadable)} unreadable skipped; "
        f"{summary['already_done']} done before this run; {summary['seconds']} s"
    )
    return "\n".join([line, *(f"  unreadable: {u['path']}: {u['reason']}" for u in unreadable)])


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `extract-features` sub-command."""
    p = sub.add_parser(
        "extract-features",
        help="pooled trunk features of many videos from a run (resumable, torchrun-parallel)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "run", type=Path, metavar="RUN", help="run directory, or a checkpoint file inside one"
    )
    p.add_argument(
        "videos", type=Path, nargs="*", metavar="VIDEO", help="video files (instead of --data)"
    )
    p.add_argument(
        "--data", type=Path, default=None, metavar="DIR", help="a dataset root, read as eval does"
    )
    p.add_argument(
        "--split",
        choices=["train", "val", "all"],
        default="all",
        help="--data: the listed videos of which split (all: train, then val)",
    )
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the .npz to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing finished FILE")
    p.add_argument(
        "--checkpoint",
        default=None,
        help="last, best (by val top-1), epoch_NNNN or a path (default: RUN's file, else last)",
    )
    p.add_argument(
        "--clips", type=_at_least(1), default=None, help="clips per video (test views; the run's)"
    )
    p.add_argument("--crops", type=int, choices=[1, 3], default=None, help="default: the run's")
    p.add_argument(
        "--chunk", type=_at_least(1), default=32, help="videos per chunk file written (32)"
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    add_precision_flag(p)
    add_json_flag(p)
    p.set_defaults(fn=cmd_extract_features)
