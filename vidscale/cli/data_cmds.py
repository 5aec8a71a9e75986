"""`vidscale synth` (the built-in demo dataset) and `prepare` (videos -> frame shards): their
parsers and commands."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from vidscale.cli.args import _above, _at_least
from vidscale.cli.output import add_json_flag, print_result, progress_to_stderr
from vidscale.config import ConfigError, DataConfig
from vidscale.data.layouts import LAYOUTS

if TYPE_CHECKING:
    from vidscale.data.synthetic.multilabel import MultiLabelSynthSummary


def cmd_synth(args: argparse.Namespace) -> int:
    from vidscale.data.synthetic.images import write_synthetic_images
    from vidscale.data.synthetic.videos import write_synthetic_dataset

    if args.images and args.multi_label:
        raise ConfigError("--multi-label writes videos: leave out --images")
    # Per-class counts default by kind: images are cheaper and a batch study wants more of them.
    train, val = (256, 64) if args.images else (192, 24)
    counts = {
        "train_per_class": args.train_per_class or train,
        "val_per_class": args.val_per_class or val,
    }
    # Three objects in a frame's quadrants need more pixels than the single-label demo's one.
    size = args.size or (MULTI_LABEL_SIZE if args.multi_label else 32)
    if args.images:
        if args.frames is not None:
            raise ConfigError("--frames applies to videos, not --images")
        images = write_synthetic_images(args.out, seed=args.seed, size=size, **counts)
        print_result(images, as_json=args.json)
        return 0
    if size % 2:
        raise ConfigError(f"--size must be even (H.264 4:2:0), got {size}")
    if args.multi_label:
        print_result(_synth_multi_label(args, size=size), as_json=args.json)
        return 0
    summary = write_synthetic_dataset(
        args.out, seed=args.seed, size=size, num_frames=args.frames or 16, **counts
    )
    print_result(summary, as_json=args.json)
    return 0


# `synthetic.multilabel.DEFAULT_SIZE` (a test keeps them equal), here so that `--help` imports
# no video code.
MULTI_LABEL_SIZE = 48


def _synth_multi_label(args: argparse.Namespace, *, size: int) -> MultiLabelSynthSummary:
    """The multi-label demo (`multilabel` layout); a per-class count N asks for N videos per
    class in all, N x 6 videos (each video has 2-3 classes); without one, the demo's counts."""
    from vidscale.data.synthetic.multilabel import MULTI_LABEL_CLASSES, write_multilabel_dataset

    counts = {
        f"{split}_videos": per_class * len(MULTI_LABEL_CLASSES)
        for split, per_class in (("train", args.train_per_class), ("val", args.val_per_class))
        if per_class is not None
    }
    return write_multilabel_dataset(
        args.out, seed=args.seed, size=size, num_frames=args.frames or 16, **counts
    )


def cmd_prepare(args: argparse.Namespace) -> int:
    from vidscale.data.media.flow import FlowUnavailable
    from vidscale.data.prepared.prepare import PrepareError, prepare_from_layout

    try:
        with progress_to_stderr(args.json):
            manifest = prepare_from_layout(
                args.layout,
                args.root,
                args.out,
                split=args.split,
                skip_missing=args.skip_missing,
                annotations_dir=args.annotations_dir,
                short_side=args.short_side,
                fps=args.fps,
                quality=args.quality,
                flow=args.flow,
                shard_bytes=int(args.shard_size * 1e6),
                workers=args.workers,
                seed=args.seed,
                progress=not args.no_progress,
            )
    except PrepareError as err:  # OUT holds frames prepared with other options
        raise ConfigError(f"--out: {err}") from err
    except FlowUnavailable as err:  # this OpenCV build lacks the method
        raise ConfigError(f"--flow {args.flow}: {err}") from err
    print_result(manifest, as_json=args.json)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `synth` and `prepare` sub-commands, in `vidscale --help` order."""
    _add_synth_parser(sub)
    _add_prepare_parser(sub)


def _add_synth_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synth", help="write the built-in demo dataset (real H.264 or JPEG files)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--images", action="store_true", help="the image set (imagefolder layout)")
    p.add_argument(
        "--multi-label",
        action="store_true",
        help="the multi-label video set: 2-3 classes a video (multilabel layout)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--train-per-class",
        type=_at_least(1),
        help="videos 192, images 256 (--multi-label: N x 6 videos in all; 2048 without)",
    )
    p.add_argument(
        "--val-per-class",
        type=_at_least(1),
        help="videos 24, images 64 (--multi-label: N x 6 videos in all; 256 without)",
    )
    p.add_argument(
        "--size",
        type=_at_least(16),
        default=None,
        help=f"side in pixels (32; --multi-label {MULTI_LABEL_SIZE}; video: even)",
    )
    p.add_argument("--frames", type=_at_least(4), help="frames per video (16)")
    add_json_flag(p)
    p.set_defaults(fn=cmd_synth)


def _add_prepare_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help="videos + annotations -> JPEG frame shards + index")
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=DataConfig.layout,
    )
    p.add_argument("--root", type=Path, required=True, help="the dataset as downloaded")
    p.add_argument("--out", type=Path, required=True, help="the prepared dataset directory")
    p.add_argument("--annotations-dir", type=Path, default=None)
    p.add_argument("--split", type=int, choices=[1, 2, 3], default=1, help="UCF101/HMDB51 split")
    p.add_argument("--skip-missing", action="store_true", help="report missing videos, go on")
    p.add_argument(
        "--short-side", type=_at_least(0), default=256, help="resize the short side (px; 0: keep)"
    )
    p.add_argument("--fps", type=_above(0), default=None, help="resample videos to this rate")
    p.add_argument("--quality", type=_at_least(1, 100), default=90, help="JPEG quality (1-100)")
    from vidscale.data.media.flow import FLOW_METHODS

    p.add_argument(
        "--flow",
        choices=FLOW_METHODS,
        default=None,
        help="also prepare the optical flow between consecutive frames into OUT/flow",
    )
    p.add_argument("--shard-size", type=_above(0), default=1000.0, help="MB per shard")
    p.add_argument("--workers", type=_at_least(0), default=0, help="processes (0: all cores)")
    p.add_argument("--seed", type=int, default=0, help="video order in the shards")
    p.add_argument("--no-progress", action="store_true")
    add_json_flag(p)
    p.set_defaults(fn=cmd_prepare)
