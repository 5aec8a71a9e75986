"""`vidscale plan`: the scaling model as a capacity planner (planner/capacity.py,
docs/scaling.md). Its parser and command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vidscale.cli.args import (
    _above,
    _at_least,
    _check_model,
    _check_parent,
    _duration,
    _int_list,
    _name_list,
    _non_negative,
)
from vidscale.cli.flags import add_renamed
from vidscale.cli.output import add_json_flag, print_json_file, print_result
from vidscale.config import ConfigError


def _plan_request(args: argparse.Namespace, gpus: int | None) -> Any:
    """The request of the flags; with --measured, the file's inputs where no flag gives them."""
    from vidscale.planner.capacity import PlanRequest, with_measured
    from vidscale.planner.measured import read_measured

    _check_model("--model", args.model)
    req = PlanRequest(
        model=args.model,
        hardware=args.hardware,
        gpus=gpus,
        batch_per_gpu=args.batch_per_gpu or 8,
        epochs=args.epochs,
        clips=args.epoch_clips,
        frames=args.frames,
        step_time=args.step_time,
        data_time=args.data_time,
        bandwidth_gbps=args.bandwidth_gbps,
        latency_us=args.latency_us,
        gpus_per_node=args.gpus_per_node,
        bucket_mb=args.bucket_cap_mb,
        framework=args.framework,
        grad_dtype=args.grad_dtype,
    )
    if args.measured is None:
        return req
    measured = read_measured(args.measured, args.model)
    return with_measured(req, measured, keep_batch=args.batch_per_gpu is not None)


def _plan_paper_figures(out: Path, *, as_json: bool) -> int:
    from vidscale.planner.paper_figures import format_paper, write_paper_figures
    from vidscale.planner.paper_scaling import paper_report

    _check_parent("--paper-figures", out / "scaling_paper.json", made=True)
    report = paper_report()
    files = write_paper_figures(out, report)
    if as_json:
        print_json_file(files[0])  # scaling_paper.json
        return 0
    print(format_paper(report))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from vidscale.planner import capacity
    from vidscale.planner import report as plan_report

    if args.paper_figures is not None:
        return _plan_paper_figures(args.paper_figures, as_json=args.json)
    if args.target is not None and (args.compare or args.world_size is not None):
        raise ConfigError(
            "--target finds the GPU count itself: leave out --world-size and --compare"
        )
    gpus = args.world_size or (None,)  # default: one whole node of the hardware
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
        counts = args.world_size or capacity.default_gpu_counts(req)
        results = capacity.compare(req, models, counts)
        out = [plan_report.plan_as_dict(r) for r in results]
        text = plan_report.format_table(results)
    else:
        result = capacity.plan(req)
        out = plan_report.plan_as_dict(result)
        text = plan_report.format_plan(result)
    print_result(out, as_json=args.json, text=text)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `plan` sub-command."""
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
    p.add_argument(
        "--world-size",
        type=_int_list(1),
        default=None,
        help="processes, one per GPU: 48, or a list 48,384 (one node)",
    )
    p.add_argument(
        "--batch-per-gpu",
        type=_at_least(1),
        default=None,
        help="clips per GPU (8, or the --measured run's)",
    )
    p.add_argument("--epochs", type=_above(0), default=100.0, help="epochs (100)")
    p.add_argument(
        "--epoch-clips", type=_at_least(1), default=240_000, help="clips per epoch (240,000)"
    )
    add_renamed(p, "--clips", "--epoch-clips")
    p.add_argument("--frames", type=_at_least(1), default=None, help="frames per clip (model's)")
    p.add_argument("--target", type=_duration, default=None, help="fewest GPUs for this time: 15m")
    p.add_argument(
        "--compare", type=_name_list(), default=None, metavar="MODEL,...", help="side by side"
    )
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
    p.add_argument(
        "--bucket-cap-mb", type=_above(0), default=None, help="DDP bucket / Horovod fusion, MB"
    )
    add_renamed(p, "--bucket-mb", "--bucket-cap-mb")
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
    add_json_flag(p)
    p.add_argument(
        "--paper-figures",
        type=Path,
        default=None,
        metavar="DIR",
        help="reproduce Table 3, Fig. 3c and Fig. 6: print them, write JSON and plots to DIR",
    )
    p.set_defaults(fn=cmd_plan)
