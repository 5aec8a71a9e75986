"""The `vidscale` command: parse, load a recipe, apply `--set` overrides, call one function.

Bad input of any command (a flag, a config field, an annotation line, a missing or unreadable
file or video) ends it with one line `vidscale: error: ...` on stderr and exit status 2;
`vidscale --debug COMMAND ...` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from vidscale.config import ConfigError, RunConfig, apply_overrides, load_config

if TYPE_CHECKING:
    from vidscale.bench.models import BenchConfig, Mode


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", help="named recipe (see `vidscale recipes`)")
    p.add_argument("--data", type=Path, help="dataset directory (sets data.root)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set optim.accumulate=4 (repeatable)",
    )


def _with_data_root(args: argparse.Namespace) -> tuple[str, ...]:
    """The --set overrides, after `data.root` from --data when given."""
    data = [f"data.root={args.data}"] if args.data is not None else []
    return (*data, *args.overrides)


def resolve_config(args: argparse.Namespace, *, run_dir: Path | None = None) -> RunConfig:
    """The recipe (or, without one, the saved config of the run in `run_dir`) + --data + --set.

    A re-run of the same command therefore resolves to the same config, and `vidscale train
    --out RUN` alone continues RUN with its own settings.
    """
    from vidscale.recipes import get_recipe

    saved = run_dir / "config.json" if run_dir is not None else None
    if args.recipe:
        cfg = get_recipe(args.recipe)
    elif saved is not None and saved.exists():
        cfg = load_config(saved)
    else:
        raise ConfigError("--recipe is required (see `vidscale recipes`)")
    return apply_overrides(cfg, list(_with_data_root(args)))


def cmd_train(args: argparse.Namespace) -> int:
    from vidscale.train.loop import train

    cfg = resolve_config(args, run_dir=args.out)
    summary = train(cfg, run_dir=args.out, resume=args.resume)
    if summary and args.print_summary:
        print(json.dumps({k: v for k, v in summary.items() if k != "skipped"}, indent=2))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from vidscale.train.sweep import SweepSpec, parse_list, sweep

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
    from vidscale.train.aavg_study import StudySpec, aavg_study
    from vidscale.train.sweep import parse_list

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
    from vidscale.train.multigrid_study import MultigridStudySpec, multigrid_study

    spec = MultigridStudySpec(
        recipe=args.recipe,
        out=args.out,
        overrides=_with_data_root(args),
        nproc=args.nproc,
        margin=args.margin,
    )
    multigrid_study(spec, plot_only=args.plot_only)
    return 0


def cmd_two_stream_study(args: argparse.Namespace) -> int:
    from vidscale.train.two_stream_study import TwoStreamStudySpec, two_stream_study

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


def cmd_synth(args: argparse.Namespace) -> int:
    from vidscale.data.synthetic import write_synthetic_dataset
    from vidscale.data.synthetic_images import write_synthetic_images

    # Per-class counts default by kind: images are cheaper and a batch study wants more of them.
    train, val = (256, 64) if args.images else (96, 24)
    counts = {
        "train_per_class": args.train_per_class or train,
        "val_per_class": args.val_per_class or val,
    }
    if args.images:
        if args.frames is not None:
            raise ConfigError("--frames applies to videos, not --images")
        print(write_synthetic_images(args.out, seed=args.seed, size=args.size, **counts))
        return 0
    if args.size % 2:
        raise ConfigError(f"--size must be even (H.264 4:2:0), got {args.size}")

    summary = write_synthetic_dataset(
        args.out, seed=args.seed, size=args.size, num_frames=args.frames or 16, **counts
    )
    print(summary)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from vidscale.data.flow import FlowUnavailable
    from vidscale.data.prepare import PrepareError, prepare_from_layout

    try:
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
    print(manifest)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from vidscale.bench.flops import format_info, info_as_dict, model_info
    from vidscale.models.registry import ModelConfig, default_frames, default_num_classes

    _check_model("NAME", args.name)
    frames = args.frames or default_frames(args.name)
    num_classes = args.num_classes or default_num_classes(args.name)
    cfg = ModelConfig(name=args.name, num_classes=num_classes, frames=frames)
    info = model_info(cfg, frames=frames, size=args.size)
    print(json.dumps(info_as_dict(info), indent=2) if args.json else format_info(info))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from vidscale.models.registry import list_models

    print("\n".join(list_models()))
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    from vidscale.recipes import DOCS, get_recipe, list_recipes
    from vidscale.train.plan import recipe_row

    names = [n for n in list_recipes() if not args.filter or args.filter in n]
    rows = [
        {
            **recipe_row(
                n, get_recipe(n), world_size=args.world_size, train_size=args.dataset_size
            ),
            "about": DOCS[n],
        }
        for n in names
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{args.dataset_size:,} training videos on {args.world_size} process(es)")
    width = max([32, *(len(str(r["recipe"])) for r in rows)])
    head = f"{'recipe':{width}s} {'GPUs':>5s} {'accum':>5s} {'batch':>7s} {'lr':>8s} "
    head += f"{'warmup':>7s} {'steps/ep':>8s} {'epochs':>6s}  about"
    print(head)
    for r in rows:
        print(
            f"{r['recipe']:{width}s} {r['recipe_gpus']:5d} {r['accumulate']:5d} "
            f"{r['global_batch']:7,d} {r['lr']:8.4g} {r['warmup_steps']:7d} "
            f"{r['steps_per_epoch']:8d} {r['epochs']:6d}  {r['about']}"
        )
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from vidscale.config import validate
    from vidscale.recipes import get_recipe
    from vidscale.train.schedule_report import schedule_report

    cfg = apply_overrides(get_recipe(args.recipe), args.overrides)
    validate(cfg)
    report = schedule_report(cfg, world_size=args.world_size, train_size=args.dataset_size)
    print(f"{args.recipe} on {args.world_size} process(es), {args.dataset_size:,} training videos")
    print(report.text())
    if args.csv is not None:
        report.write_csv(args.csv)
        print(f"wrote {args.csv}")
    return 0


# -- plan: the scaling model as a capacity planner (bench/capacity.py, docs/scaling.md) ---------


def _non_negative(text: str) -> float:
    """An argparse type: a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _duration(text: str) -> float:
    """An argparse type: a duration (`15m`, `1h30m`, `90s`) in seconds."""
    from vidscale.bench.capacity import parse_duration

    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _plan_request(args: argparse.Namespace, gpus: int | None) -> Any:
    """The request of the flags; with --measured, the file's inputs where no flag gives them."""
    from vidscale.bench.capacity import PlanRequest, read_measured, with_measured

    _check_model("--model", args.model)
    req = PlanRequest(
        model=args.model,
        hardware=args.hardware,
        gpus=gpus,
        batch_per_gpu=args.batch_per_gpu or 8,
        epochs=args.epochs,
        clips=args.clips,
        frames=args.frames,
        step_time=args.step_time,
        data_time=args.data_time,
        bandwidth_gbps=args.bandwidth_gbps,
        latency_us=args.latency_us,
        gpus_per_node=args.gpus_per_node,
        bucket_mb=args.bucket_mb,
        framework=args.framework,
        grad_dtype=args.grad_dtype,
    )
    if args.measured is None:
        return req
    measured = read_measured(args.measured, args.model)
    return with_measured(req, measured, keep_batch=args.batch_per_gpu is not None)


def _plan_paper_figures(out: Path) -> int:
    from vidscale.bench.paper_figures import format_paper, write_paper_figures
    from vidscale.bench.paper_scaling import paper_report

    _check_parent("--paper-figures", out / "scaling_paper.json", made=True)
    report = paper_report()
    files = write_paper_figures(out, report)
    print(format_paper(report))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from vidscale.bench import capacity, plan_report

    if args.paper_figures is not None:
        return _plan_paper_figures(args.paper_figures)
    if args.target is not None and (args.compare or args.gpus is not None):
        raise ConfigError("--target finds the GPU count itself: leave out --gpus and --compare")
    gpus = args.gpus or (None,)  # default: one whole node of the hardware
    req = _plan_request(args, gpus[0])
    for warning in capacity.measured_warnings(req):
        print(f"vidscale plan: warning: {warning}", file=sys.stderr)
    out: Any
    if args.target is not None:
        found = capacity.gpus_for_target(req, args.target)
        out = plan_report.target_as_dict(found)
        text = plan_report.format_target(found)
    elif args.compare or len(gpus) > 1:
        models = tuple(args.compare or (args.model,))
        for name in models:
            _check_model("--compare", name)
        counts = args.gpus or capacity.default_gpu_counts(req)
        results = capacity.compare(req, models, counts)
        out = [plan_report.plan_as_dict(r) for r in results]
        text = plan_report.format_table(results)
    else:
        result = capacity.plan(req)
        out = plan_report.plan_as_dict(result)
        text = plan_report.format_plan(result)
    print(json.dumps(out, indent=2) if args.json else text)
    return 0


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="time to train on P GPUs, GPUs for a target time, models compared (scaling model)",
        description="Predict data-parallel training time from the scaling model of "
        "docs/scaling.md: step = compute + exposed all-reduce (ring, overlapped with the "
        "backward pass) + exposed data loading.",
    )
    p.add_argument("--model", default="tsm_resnet50", help="registry model (tsm_resnet50)")
    p.add_argument(
        "--hardware",
        default="summit",
        help="summit, paper-p100, dgx-a100, dgx-h100 or local (summit)",
    )
    p.add_argument("--gpus", type=_int_list(1), default=None, help="GPUs or 48,384 (one node)")
    p.add_argument(
        "--batch-per-gpu",
        type=_at_least(1),
        default=None,
        help="clips per GPU (8, or the --measured run's)",
    )
    p.add_argument("--epochs", type=_above(0), default=100.0, help="epochs (100)")
    p.add_argument("--clips", type=_at_least(1), default=240_000, help="clips per epoch (240,000)")
    p.add_argument("--frames", type=_at_least(1), default=None, help="frames per clip (model's)")
    p.add_argument("--target", type=_duration, default=None, help="fewest GPUs for this time: 15m")
    p.add_argument("--compare", nargs="+", default=None, metavar="MODEL", help="side by side")
    p.add_argument(
        "--step-time", type=_above(0), default=None, help="measured s per step, one GPU, no comm"
    )
    p.add_argument(
        "--data-time",
        type=_non_negative,
        default=None,
        help="loader s per clip per GPU (hidden, or --measured's wait)",
    )
    p.add_argument(
        "--bandwidth-gbps", type=_above(0), default=None, help="achieved Gb/s per node (network)"
    )
    p.add_argument("--latency-us", type=_non_negative, default=None, help="network hop latency")
    p.add_argument("--gpus-per-node", type=_at_least(1), default=None)
    p.add_argument("--bucket-mb", type=_above(0), default=None, help="DDP bucket / Horovod fusion")
    p.add_argument("--grad-dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--framework", choices=["ddp", "horovod"], default=None)
    p.add_argument(
        "--measured",
        type=Path,
        default=None,
        metavar="FILE",
        help="a `vidscale bench scaling` JSON: --model's measured compute, data wait and "
        "overlap (explicit flags win)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--paper-figures",
        type=Path,
        default=None,
        metavar="DIR",
        help="reproduce Table 3, Fig. 3c and Fig. 6: print them, write JSON and plots to DIR",
    )
    p.set_defaults(fn=cmd_plan)


def cmd_eval(args: argparse.Namespace) -> int:
    import dataclasses

    from vidscale.train.eval_run import PAPER_VIEWS, Views, evaluate_run

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
        args.run[0], last=args.last, overrides=args.overrides, data=args.data, views=views
    )
    print(json.dumps(result, indent=2))
    return 0


def _eval_two_stream(args: argparse.Namespace, views: Any) -> int:
    from vidscale.train.run_ref import checkpoint_path, locate
    from vidscale.train.two_stream_eval import evaluate_two_stream

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
    )
    print(json.dumps(result, indent=2))
    return 0


def cmd_bench_data(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from vidscale.bench.dataload import PRESETS, bench_data

    _check_dir("--videos", args.videos)
    _check_parent("--out-json", args.out_json)
    generate = replace(PRESETS[args.preset], count=args.count, seconds=args.seconds)
    bench_data(
        args.videos,
        out_json=args.out_json,
        work_dir=args.work_dir,
        rounds=args.rounds,
        generate=generate,
        threads=args.threads,
    )
    return 0


def cmd_bench_data_wait(args: argparse.Namespace) -> int:
    from vidscale.bench.dataload import bench_data_wait

    _check_model("--model", args.model)
    _check_dir("--videos", args.videos)
    _check_parent("--out-json", args.out_json)
    bench_data_wait(
        args.model,
        batch=args.batch,
        frames_list=args.frames,
        workers_list=args.workers,
        steps=args.steps,
        size=args.size,
        source=args.source,
        videos_dir=args.videos,
        out_json=args.out_json,
    )
    return 0


# -- predict, export, bench models ------------------------------------------------------------


def _at_least(low: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= `low` (and <= `most`); argparse names the flag in its
    error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"must be <= {most}, got {value}")
        return value

    return parse


def _above(low: float) -> Callable[[str], float]:
    """An argparse type: a number > `low`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > low:  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be > {low:g}, got {text}")
        return value

    return parse


def _int_list(low: int) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: comma-separated integers, each >= `low` (e.g. `8,16,32`)."""
    one = _at_least(low)

    def parse(text: str) -> tuple[int, ...]:
        try:
            return tuple(one(item) for item in text.split(","))
        except argparse.ArgumentTypeError as err:
            if "," not in text:
                raise
            raise argparse.ArgumentTypeError(f"{err} in {text!r}") from None

    return parse


def _weights(text: str) -> tuple[float, float]:
    """`--weights 1,1.5`: two fusion weights >= 0, not both 0."""
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 2 or min(parts) < 0 or sum(parts) <= 0:
        raise argparse.ArgumentTypeError(f"expected two weights RGB,FLOW >= 0, got {text!r}")
    return parts[0], parts[1]


def _check_run(name: str, run: Path) -> None:
    if not (run / "config.json").is_file():
        raise ConfigError(f"{name}: {run} has no config.json (not a training run)")


def _check_dir(flag: str, path: Path | None) -> None:
    if path is not None and not path.is_dir():
        raise ConfigError(f"{flag}: {path} is not a directory")


def _check_parent(flag: str, path: Path, *, made: bool = False) -> None:
    """An output file's directory must exist (or, where the command `made` it, must not lie
    below a file): found out before a long run, not after it."""
    parent = path.parent
    if made:
        parent = next(p for p in (parent, *parent.parents) if p.exists())
    if not parent.is_dir():
        raise ConfigError(f"{flag}: {parent} is not a directory")


def _check_model(flag: str, name: str) -> None:
    from vidscale.models.registry import list_models

    if name not in list_models():
        raise ConfigError(f"{flag}: unknown model {name!r}; see `vidscale models`")


def _check_device(device: str) -> None:
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: no CUDA device is available")


def cmd_predict(args: argparse.Namespace) -> int:
    from vidscale.predict import format_predictions, predict, predictions_as_dict
    from vidscale.train.run_ref import checkpoint_path, locate

    if not args.video.is_file():
        raise ConfigError(f"VIDEO: {args.video} is not a file")
    try:
        run, checkpoint = locate(args.checkpoint)
        checkpoint_path(run, checkpoint)
    except FileNotFoundError as err:
        raise ConfigError(f"--checkpoint: {err}") from err
    flow_run, flow_checkpoint = None, "last"
    if args.flow_checkpoint is not None:
        try:
            flow_run, flow_checkpoint = locate(args.flow_checkpoint)
            checkpoint_path(flow_run, flow_checkpoint)
        except FileNotFoundError as err:
            raise ConfigError(f"--flow-checkpoint: {err}") from err
    _check_device(args.device)
    top = predict(
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
    )
    out = predictions_as_dict(args.video, top)
    print(json.dumps(out, indent=2) if args.json else format_predictions(top))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from vidscale.export import DYNAMO_MIN_OPSET, MIN_ONNX_OPSET, ExportMismatch, export
    from vidscale.train.run_ref import checkpoint_path

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
    print(f"wrote {result.path} and {result.path.name}.json; check: {result.check}")
    return 0


def _bench_models_config(args: argparse.Namespace) -> BenchConfig:
    import dataclasses

    from vidscale.bench.models import PASSES, BenchConfig

    # Every BenchConfig field has a flag of the same name; unset flags keep the base's value.
    fields = [f.name for f in dataclasses.fields(BenchConfig) if f.name not in ("modes", "passes")]
    given = {k: getattr(args, k) for k in fields if getattr(args, k) is not None}
    if args.no_fast_path:
        modes: tuple[Mode, ...] = ("fp32",)
    else:
        modes = ("fp32", "fast") if args.fp32_baseline else ("fast",)
    passes = tuple(dict.fromkeys(args.passes or PASSES))
    base = BenchConfig.quick() if args.quick else BenchConfig()
    return dataclasses.replace(base, **given, modes=modes, passes=passes)


def cmd_bench_models(args: argparse.Namespace) -> int:
    from vidscale.bench.models import DEFAULT_MODELS, bench_models, check_request
    from vidscale.bench.report import format_report

    cfg = _bench_models_config(args)
    _check_parent("--out-json", args.out_json)
    names = args.models or list(DEFAULT_MODELS)
    try:
        check_request(names, cfg, baseline=args.baseline)
    except ValueError as err:
        raise ConfigError(f"bench models: {err}") from err
    _check_device(args.device)
    result = bench_models(
        names,
        cfg,
        baseline=args.baseline,
        device=args.device,
        out_json=args.out_json,
        progress=True,
    )
    print(format_report(result))
    print(f"wrote {args.out_json}")
    return 0


def _add_predict_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="top-k classes of one video from a trained run")
    p.add_argument("video", type=Path, metavar="VIDEO")
    p.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        metavar="RUN",
        help="run directory (its last checkpoint) or a checkpoint file inside one",
    )
    p.add_argument(
        "--flow-checkpoint",
        type=Path,
        default=None,
        metavar="FLOW_RUN",
        help="a flow-stream run: predict by two-stream late fusion with RUN (the RGB stream)",
    )
    p.add_argument(
        "--weights", type=_weights, default=(1.0, 1.0), help="fusion weights RGB,FLOW (1,1)"
    )
    p.add_argument("--topk", type=_at_least(1), default=5)
    p.add_argument("--clips", type=_at_least(1), default=None, help="default: the run's")
    p.add_argument("--crops", type=int, choices=[1, 3], default=None, help="default: the run's")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_predict)

    p = sub.add_parser(
        "export", help="TorchScript or ONNX file of a trained run, or its ResNet trunk; checked"
    )
    p.add_argument("run", type=Path, metavar="RUN")
    p.add_argument(
        "--format",
        choices=["torchscript", "onnx", "trunk"],
        required=True,
        help="trunk: the torchvision-format ResNet state_dict, a `model.pretrained` file",
    )
    p.add_argument("--out", type=Path, required=True, metavar="FILE")
    p.add_argument("--opset", type=_at_least(1), default=None, help="ONNX opset (default 18)")
    p.add_argument(
        "--checkpoint", default="last", help="last, best (by val top-1), epoch_NNNN or a path"
    )
    p.set_defaults(fn=cmd_export)


def _add_bench_models(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser(
        "models", help="TSM paper Tables 1-2: cost, speed, utilisation, frames per stage"
    )
    p.add_argument(
        "models", nargs="*", metavar="MODELS", help="default: TSM, TSN, I3D 3x1x1, I3D 3x3x3"
    )
    p.add_argument("--baseline", default=None, help="ratios are to this model (default: first)")
    p.add_argument("--batch", type=_at_least(1), default=None, help="clips per step (1)")
    p.add_argument("--size", type=_at_least(32), default=None, help="frame side (224)")
    p.add_argument("--frames", type=_at_least(0), default=None, help="0: each model's own")
    p.add_argument("--warmup", type=_at_least(0), default=None, help="untimed rounds (1)")
    p.add_argument("--repeats", type=_at_least(1), default=None, help="timed rounds (5)")
    p.add_argument("--steps", type=_at_least(1), default=None, help="calls per sample (1)")
    p.add_argument(
        "--settle", type=_at_least(0), default=None, help="untimed calls before each sample (1)"
    )
    p.add_argument("--passes", nargs="+", choices=["train", "infer"], default=None)
    modes = p.add_mutually_exclusive_group()
    modes.add_argument("--fp32-baseline", action="store_true", help="also time fp32 beside")
    modes.add_argument("--no-fast-path", action="store_true", help="time fp32 only")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=_at_least(0), default=None, help="CPU threads (0: torch's)")
    p.add_argument("--peak-size", type=_at_least(0), default=None, help="peak matmul side")
    p.add_argument("--num-classes", type=_at_least(1), default=None, help="classes (400)")
    p.add_argument("--clock", choices=["wall", "process"], default=None)
    p.add_argument(
        "--probe-repeats",
        type=_at_least(1),
        default=None,
        help="timed rounds of the probe deciding what auto (the fast rows) runs (5)",
    )
    p.add_argument("--quick", action="store_true", help="tiny settings for a smoke test")
    p.add_argument("--out-json", type=Path, default=Path("bench_models.json"))
    p.set_defaults(fn=cmd_bench_models)


# -- bench flow --------------------------------------------------------------------------------


def _width_x_height(text: str) -> tuple[int, int]:
    """An argparse type: `WIDTHxHEIGHT` in pixels, each >= 16 (e.g. `340x256`)."""
    w, sep, h = text.lower().partition("x")
    if not (sep and w.isdigit() and h.isdigit() and int(w) >= 16 and int(h) >= 16):
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, each >= 16, got {text!r}")
    return int(w), int(h)


def _flow_method_list(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated optical flow methods (e.g. `dis,tvl1`)."""
    from vidscale.data.flow import FLOW_METHODS

    names = tuple(text.split(","))
    unknown = [n for n in names if n not in FLOW_METHODS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown method {unknown[0]!r} in {text!r}; choose from {','.join(FLOW_METHODS)}"
        )
    return names


def cmd_bench_flow(args: argparse.Namespace) -> int:
    from vidscale.bench.flow import FlowBenchConfig, bench_flow, format_flow_table

    if args.video is not None and not args.video.is_file():
        raise ConfigError(f"--video: {args.video} is not a file")
    _check_parent("--out-json", args.out_json)
    width, height = args.size
    cfg = FlowBenchConfig(
        pairs=args.pairs, width=width, height=height, methods=args.methods, video=args.video
    )
    print(format_flow_table(bench_flow(cfg, out_json=args.out_json)))
    print(f"wrote {args.out_json}")
    return 0


def _add_bench_flow(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser(
        "flow", help="optical flow per CPU core: DIS vs Farneback vs TV-L1, speed and accuracy"
    )
    p.add_argument("--video", type=Path, default=None, help="default: a generated demo video")
    p.add_argument("--pairs", type=_at_least(1), default=30, help="consecutive frame pairs")
    p.add_argument("--size", type=_width_x_height, default=(340, 256), help="WxH (340x256)")
    p.add_argument(
        "--methods", type=_flow_method_list, default=("dis", "farneback", "tvl1"), help="dis,..."
    )
    p.add_argument("--out-json", type=Path, default=Path("bench_flow.json"))
    p.set_defaults(fn=cmd_bench_flow)


# -- bench scaling -----------------------------------------------------------------------------


def cmd_bench_scaling(args: argparse.Namespace) -> int:
    import dataclasses

    from vidscale.bench.scaling import (
        ScalingConfig,
        ScalingRunFailed,
        bench_scaling,
        resolve,
        run_worker,
        torchrun_world,
    )
    from vidscale.bench.scaling_report import format_table

    # Every ScalingConfig field but `fast_path` has a flag of the same name; unset flags keep
    # the config's default.
    names = [f.name for f in dataclasses.fields(ScalingConfig) if hasattr(args, f.name)]
    given = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}
    cfg = resolve(ScalingConfig(**given, fast_path=not args.no_fast_path), world=torchrun_world())
    if args.worker_out is not None:  # a rank of a torchrun that `bench scaling` started
        run_worker(cfg, args.worker_out)
        return 0
    _check_parent("--out-json", args.out_json)
    _check_parent("--plot", args.plot)
    if args.baseline is not None and not args.baseline.is_file():
        raise ConfigError(f"--baseline: {args.baseline} is not a file")
    try:
        result = bench_scaling(cfg, out_json=args.out_json, plot=args.plot, baseline=args.baseline)
    except ScalingRunFailed as err:  # not bad input: a run failed (status 1, its output above)
        print(f"vidscale: error: bench scaling: {err}", file=sys.stderr)
        return 1
    if result is not None:  # rank 0
        print(format_table(result.report))
        print("wrote " + ", ".join(str(f) for f in result.files))
    return 0


def _add_bench_scaling(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser(
        "scaling",
        help="TSM paper Fig. 6: clips/s, speed-up and efficiency vs processes; each step "
        "split into compute, data wait and exposed communication",
    )
    p.add_argument("--models", nargs="+", default=None, help="registered models (tsm_resnet50)")
    p.add_argument(
        "--procs",
        nargs="+",
        type=_at_least(1),
        default=None,
        help="process counts (1, 2, 4, ... up to the cores, or the GPUs); under torchrun: its "
        "world size",
    )
    p.add_argument("--steps", type=_at_least(1), default=None, help="measured steps (8)")
    p.add_argument("--warmup", type=_at_least(0), default=None, help="untimed steps first (3)")
    p.add_argument("--batch", type=_at_least(1), default=None, help="clips per process (8)")
    p.add_argument("--frames", type=_at_least(1), default=None, help="frames per clip (8)")
    p.add_argument("--size", type=_at_least(32), default=None, help="frame side (224)")
    p.add_argument("--num-classes", type=_at_least(1), default=None, help="classes (400)")
    p.add_argument(
        "--threads", type=_at_least(0), default=None, help="threads per process (0: cores/max P)"
    )
    p.add_argument("--workers", type=_at_least(0), default=None, help="loader processes (0)")
    p.add_argument(
        "--hooks",
        nargs="+",
        choices=["none", "fp16", "bf16", "powersgd"],
        default=None,
        help="DDP gradient hooks (none bf16 powersgd)",
    )
    p.add_argument(
        "--strategies", nargs="+", choices=["ddp", "aavg"], default=None, help="(ddp aavg)"
    )
    p.add_argument("--aavg-k", type=_at_least(1), default=None, help="AAVG: steps per average (4)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None)
    p.add_argument("--bucket-cap-mb", type=_above(0), default=None, help="DDP buckets (25)")
    p.add_argument("--no-fast-path", action="store_true", help="fp32, default memory layout")
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="an earlier JSON whose 1-process rows to compare with (under torchrun)",
    )
    p.add_argument("--out-json", type=Path, default=Path("bench_scaling.json"))
    p.add_argument("--plot", type=Path, default=Path("bench_scaling.png"))
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    p.set_defaults(fn=cmd_bench_scaling)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vidscale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--debug", action="store_true", help="on an error, show its traceback instead of one line"
    )
    sub = parser.add_subparsers(dest="command", required=True)

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

    p = sub.add_parser("synth", help="write the built-in demo dataset (real H.264 or JPEG files)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--images", action="store_true", help="the image set (imagefolder layout)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-per-class", type=_at_least(1), help="videos 96, images 256")
    p.add_argument("--val-per-class", type=_at_least(1), help="videos 24, images 64")
    p.add_argument("--size", type=_at_least(16), default=32, help="side in pixels (video: even)")
    p.add_argument("--frames", type=_at_least(4), help="frames per video (16)")
    p.set_defaults(fn=cmd_synth)

    p = sub.add_parser("prepare", help="videos + annotations -> JPEG frame shards + index")
    p.add_argument(
        "--layout",
        choices=["generic", "kinetics", "ucf101", "hmdb51", "ssv2", "imagenet", "imagefolder"],
        default="generic",
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
    from vidscale.data.flow import FLOW_METHODS

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
    p.set_defaults(fn=cmd_prepare)

    p = sub.add_parser("info", help="parameters and multiply-accumulates of a model")
    p.add_argument("name")
    p.add_argument(
        "--num-classes", type=_at_least(1), default=None, help="default: 400 video, 1000 image"
    )
    p.add_argument("--frames", type=_at_least(0), default=0, help="0: the model's default")
    p.add_argument("--size", type=_at_least(32), default=224)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_info)

    p = sub.add_parser("models", help="list registered models")
    p.set_defaults(fn=cmd_models)

    p = sub.add_parser("recipes", help="list named recipes with their resolved batch and LR")
    p.add_argument("filter", nargs="?", default="", help="only names containing this")
    p.add_argument("--world-size", type=_at_least(1), default=1, help="processes the run would use")
    p.add_argument(
        "--dataset-size",
        type=_at_least(1),
        default=240_000,
        help="training videos (default: about Kinetics-400's training split)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_recipes)

    p = sub.add_parser("schedule", help="a recipe's run epoch by epoch (multigrid stages, LR)")
    p.add_argument("recipe", help="named recipe (see `vidscale recipes`)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--world-size", type=_at_least(1), default=1, help="processes the run would use")
    p.add_argument(
        "--dataset-size",
        type=_at_least(1),
        default=240_000,
        help="training videos (default: about Kinetics-400's training split)",
    )
    p.add_argument("--csv", type=Path, default=None, help="also write the per-epoch table here")
    p.set_defaults(fn=cmd_schedule)
    _add_plan(sub)

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
    p.set_defaults(fn=cmd_eval)
    _add_predict_export(sub)

    bench = sub.add_parser("bench", help="benchmarks: print a table, write JSON")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    p = bench_sub.add_parser("data", help="clips/s and CPU ms per clip: raw H.264 vs shards")
    p.add_argument("--videos", type=Path, default=None, help="default: generate test videos")
    p.add_argument("--out-json", type=Path, default=Path("bench_data.json"))
    p.add_argument("--work-dir", type=Path, default=None)
    p.add_argument("--count", type=_at_least(1), default=4, help="videos to generate")
    p.add_argument("--seconds", type=_above(0), default=10.0, help="length of generated videos")
    p.add_argument(
        "--preset",
        choices=["default", "k400"],
        default="default",
        help="generated videos: 340x256 CRF 23, GOP 250 and 16; k400: 456x256 CRF 21, GOP 250",
    )
    p.add_argument(
        "--threads", type=_at_least(1), default=1, help="also time h264_plan on N decoder threads"
    )
    p.add_argument("--rounds", type=_at_least(1), default=5)
    p.set_defaults(fn=cmd_bench_data)
    p = bench_sub.add_parser("data-wait", help="share of step time blocked on data (Fig. 3b)")
    p.add_argument("--model", default="tsm_resnet18")
    p.add_argument("--batch", type=_at_least(1), default=2)
    p.add_argument("--frames", type=_int_list(1), default="8,16,32", help="clip lengths")
    p.add_argument("--workers", type=_int_list(0), default="0,1,2", help="loader processes")
    p.add_argument("--steps", type=_at_least(1), default=3)
    p.add_argument("--size", type=_at_least(32), default=112)
    p.add_argument("--source", choices=["videos", "shards"], default="videos")
    p.add_argument("--videos", type=Path, default=None)
    p.add_argument("--out-json", type=Path, default=Path("bench_data_wait.json"))
    p.set_defaults(fn=cmd_bench_data_wait)
    _add_bench_models(bench_sub)
    _add_bench_flow(bench_sub)
    _add_bench_scaling(bench_sub)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse with vidscale's one-line error format (exit status 2, as argparse's own)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"vidscale: error: {message} (see `{self.prog} --help`)\n")


def _one_line(err: BaseException) -> str:
    """`err` as one line: an OS error as `FILE: reason`, other messages' lines joined."""
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        files = f"{err.filename}" + (f" -> {err.filename2}" if err.filename2 else "")
        text = f"{files}: {err.strerror}"
    else:
        text = str(err) or type(err).__name__
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    """Run one command; return its exit status.

    Bad input prints one line `vidscale: error: ...` on stderr and returns 2: a config field or
    flag (`ConfigError`), an annotation file (`AnnotationError`), an undecodable video
    (`DecodeError`), a missing, unreadable or unwritable path (`OSError`), or a value a function
    rejects (`ValueError`, vidscale's convention for bad arguments). With `--debug` it is re-raised
    instead, traceback included. Ctrl-C returns 130 without a traceback. Other exceptions are bugs
    and propagate with their traceback.
    """
    args = build_parser().parse_args(argv)
    from vidscale.data.annotations import AnnotationError
    from vidscale.data.decode import DecodeError

    bad_input = (ConfigError, AnnotationError, DecodeError, OSError, ValueError)
    from vidscale.train.resilience import PREEMPTED_EXIT_CODE, Diverged, Preempted

    try:
        return int(args.fn(args))
    except Preempted as stop:  # checkpointed: the same command continues (torchrun, requeue)
        if os.environ.get("RANK", "0") == "0":  # every rank stops at the same step: say it once
            print(f"vidscale: {stop}", file=sys.stderr)
        return PREEMPTED_EXIT_CODE
    except Diverged as err:
        print(f"vidscale: error: diverged: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.debug:
            raise
        return 130
    except bad_input as err:
        if args.debug:
            raise
        print(f"vidscale: error: {_one_line(err)}", file=sys.stderr)
        return 2
    finally:
        from vidscale.distributed.env import shutdown

        shutdown()
