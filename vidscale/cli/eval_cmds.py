"""`vidscale eval`, `predict` and `export`: use a trained run (score it, classify one video,
write a deployable file). Their parsers and commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vidscale.cli.args import (
    _above,
    _at_least,
    _check_device,
    _check_parent,
    _check_run,
    _weights,
    add_precision_flag,
)
from vidscale.cli.eval_format import format_eval, format_two_stream
from vidscale.cli.output import add_json_flag, print_result
from vidscale.config import ConfigError


def cmd_eval(args: argparse.Namespace) -> int:
    import dataclasses

    from vidscale.train.evaluation.eval_run import PAPER_VIEWS, Views, evaluate_run

    if len(args.run) != (2 if args.two_stream else 1):
        raise ConfigError("eval: give RUN, or --two-stream RGB_RUN FLOW_RUN")
    views = PAPER_VIEWS if args.paper_views else None
    given = {
        name: value
        for name, value in (
            ("num_clips", args.clips),
            ("num_crops", args.crops),
            ("short_side", args.short_side),
            ("crop_size", args.crop_size),
            ("average", args.average),
        )
        if value is not None
    }
    if given:
        views = dataclasses.replace(views or Views(), **given)
    if args.two_stream:
        return _eval_two_stream(args, views)
    _check_run("RUN", args.run[0])
    result = evaluate_run(
        args.run[0],
        last=args.last,
        overrides=args.overrides,
        data=args.data,
        views=views,
        precision=args.precision,
    )
    print_result(result, as_json=args.json, text=format_eval(result))
    return 0


def _eval_two_stream(args: argparse.Namespace, views: Any) -> int:
    from vidscale.run.ref import checkpoint_path, locate
    from vidscale.train.evaluation.two_stream_eval import evaluate_two_stream

    for flag, ref in zip(("RGB_RUN", "FLOW_RUN"), args.run, strict=True):
        try:
            run, named = locate(ref)
            checkpoint_path(run, args.checkpoint or named)
        except FileNotFoundError as err:
            raise ConfigError(f"--two-stream {flag}: {err}") from err
    result = evaluate_two_stream(
        args.run[0],
        args.run[1],
        weights=args.weights,
        views=views,
        checkpoint=args.checkpoint,
        data=(args.data, args.data),
        overrides=args.overrides,
        precision=args.precision,
    )
    print_result(result, as_json=args.json, text=format_two_stream(result))
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from vidscale.predict import format_predictions, predict_video, predictions_as_dict
    from vidscale.run.ref import checkpoint_path, locate

    if not args.video.is_file():
        raise ConfigError(f"VIDEO: {args.video} is not a file")
    try:
        run, checkpoint = locate(args.run)
        checkpoint = args.checkpoint or checkpoint
        checkpoint_path(run, checkpoint)
    except FileNotFoundError as err:
        raise ConfigError(f"RUN: {err}") from err
    if args.window is None and (args.stride is not None or args.out is not None):
        raise ConfigError("--stride and --out go with --window")
    if args.window is not None:
        from vidscale.cli.timeline_cmd import cmd_predict_window

        _check_device(args.device)
        return cmd_predict_window(args, run, checkpoint)
    flow_run, flow_checkpoint = None, "last"
    if args.flow_run is not None:
        try:
            flow_run, flow_checkpoint = locate(args.flow_run)
            flow_checkpoint = args.checkpoint or flow_checkpoint
            checkpoint_path(flow_run, flow_checkpoint)
        except FileNotFoundError as err:
            raise ConfigError(f"--flow-run: {err}") from err
    _check_device(args.device)
    top = predict_video(
        args.video,
        run=run,
        checkpoint=checkpoint,
        topk=args.topk,
        num_clips=args.clips,
        num_crops=args.crops,
        device=args.device,
        flow_run=flow_run,
        flow_checkpoint=flow_checkpoint,
        weights=args.weights,
        precision=args.precision,
    )
    out = predictions_as_dict(args.video, top)
    print_result(out, as_json=args.json, text=format_predictions(top))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from vidscale.export import DYNAMO_MIN_OPSET, MIN_ONNX_OPSET, ExportMismatch, export
    from vidscale.run.ref import checkpoint_path

    _check_run("RUN", args.run)
    _check_parent("--out", args.out, made=True)
    if args.opset is not None and args.format != "onnx":
        raise ConfigError("--opset applies to --format onnx only")
    if args.opset is not None and args.opset < MIN_ONNX_OPSET:
        raise ConfigError(f"--opset must be >= {MIN_ONNX_OPSET}, got {args.opset}")
    try:
        checkpoint_path(args.run, args.checkpoint)
    except FileNotFoundError as err:
        raise ConfigError(f"--checkpoint: {err}") from err
    try:
        result = export(
            args.run,
            fmt=args.format,
            out=args.out,
            opset=args.opset or DYNAMO_MIN_OPSET,
            checkpoint=args.checkpoint,
        )
    except ExportMismatch as err:
        # Not bad input: the exported model disagrees with PyTorch (status 1, like a failed test).
        print(f"vidscale: error: export check failed: {err}", file=sys.stderr)
        return 1
    text = f"wrote {result.path} and {result.path.name}.json; check: {result.check}"
    print_result(result, as_json=args.json, text=text)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `eval`, `predict` and `export` sub-commands, in `vidscale --help` order."""
    p = sub.add_parser("eval", help="evaluate a run's checkpoints (mean/std over the last N)")
    p.add_argument("run", type=Path, nargs="+", metavar="RUN")
    p.add_argument(
        "--two-stream",
        action="store_true",
        help="RUN is RGB_RUN FLOW_RUN: their late fusion, each stream's top-1 and the fused one",
    )
    p.add_argument(
        "--weights", type=_weights, default=(1.0, 1.0), help="--two-stream weights RGB,FLOW (1,1)"
    )
    p.add_argument(
        "--checkpoint", default="", help="--two-stream: last, best or epoch_NNNN of both runs"
    )
    p.add_argument(
        "--last", type=_at_least(1), default=1, help="evaluate the last N epoch checkpoints"
    )
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--clips", type=_at_least(1), default=None, help="clips per video (test views)")
    p.add_argument("--crops", type=int, choices=[1, 3], default=None, help="crops per clip")
    p.add_argument("--short-side", type=_at_least(1), default=None, help="resize the short side")
    p.add_argument("--crop-size", type=_at_least(1), default=None, help="crop size (px)")
    p.add_argument("--average", choices=["logits", "softmax"], default=None)
    p.add_argument(
        "--paper-views", action="store_true", help="10 clips x 3 crops of 256 (TSM paper)"
    )
    add_precision_flag(p)
    add_json_flag(p)
    p.set_defaults(fn=cmd_eval)
    _add_predict_export(sub)


def _add_predict_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="top-k classes of one video from a trained run")
    p.add_argument(
        "run", type=Path, metavar="RUN", help="run directory, or a checkpoint file inside one"
    )
    p.add_argument("video", type=Path, metavar="VIDEO")
    p.add_argument(
        "--checkpoint",
        default=None,
        help="last, best (by val top-1), epoch_NNNN or a path (default: RUN's file, else last)",
    )
    p.add_argument(
        "--flow-run",
        type=Path,
        default=None,
        metavar="FLOW_RUN",
        help="a flow-stream run: predict by two-stream late fusion with RUN (the RGB stream)",
    )
    p.add_argument(
        "--weights", type=_weights, default=(1.0, 1.0), help="fusion weights RGB,FLOW (1,1)"
    )
    p.add_argument("--topk", type=_at_least(1), default=5, help="classes listed (5)")
    p.add_argument(
        "--clips", type=_at_least(1), default=None, help="clips per video (test views; the run's)"
    )
    p.add_argument("--crops", type=int, choices=[1, 3], default=None, help="default: the run's")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument(
        "--window",
        type=_above(0),
        default=None,
        metavar="SECONDS",
        help="a long video: predict windows of this length, as a timeline (JSON + PNG)",
    )
    p.add_argument(
        "--stride",
        type=_above(0),
        default=None,
        metavar="SECONDS",
        help="--window: seconds between window starts (default: the window's length)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE",
        help="--window: the timeline's .json (default VIDEO_STEM.timeline.json here); "
        "the plot goes beside it as .png",
    )
    add_precision_flag(p)
    add_json_flag(p)
    p.set_defaults(fn=cmd_predict)

    p = sub.add_parser(
        "export",
        help="TorchScript or ONNX file of a trained run, its ResNet trunk, or an MMAction2 "
        "checkpoint; checked",
    )
    p.add_argument("run", type=Path, metavar="RUN")
    p.add_argument(
        "--format",
        choices=["torchscript", "onnx", "trunk", "mmaction2"],
        required=True,
        help="trunk: the torchvision-format ResNet state_dict, a `model.pretrained` file; "
        "mmaction2: an MMAction2 1.x checkpoint (the models import-weights covers)",
    )
    p.add_argument("--out", type=Path, required=True, metavar="FILE")
    p.add_argument("--opset", type=_at_least(1), default=None, help="ONNX opset (default 18)")
    p.add_argument(
        "--checkpoint", default="last", help="last, best (by val top-1), epoch_NNNN or a path"
    )
    add_json_flag(p)
    p.set_defaults(fn=cmd_export)
