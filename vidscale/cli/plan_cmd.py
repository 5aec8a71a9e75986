"""`vidscale plan`: the scaling model as a capacity planner (planner/capacity.py,
docs/scaling.md). Its parser and command.

The flags that describe the planned run are `PlanOptions`'s fields (`bench.options.option`:
default, help, bounds), derived by `cli.flags` and checked there (`InputError` naming the flag);
`PlanOptions.request` turns them into the planner's `PlanRequest`. What chooses the command's
mode (`--target`, `--compare`, `--measured`, `--paper-figures`, `--json`) is declared here."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vidscale.bench.options import option
from vidscale.cli.args import _check_model, _check_parent, _duration, _name_list
from vidscale.cli.flags import add_config_flags, add_renamed, config_from_args
from vidscale.cli.output import add_json_flag, print_json_file, print_result
from vidscale.config import ConfigError


@dataclass(frozen=True)
class PlanOptions:
    """The planned run as `vidscale plan`'s flags give it (None: the hardware's, the model's or
    the `--measured` run's value)."""

    model: str = option("tsm_resnet50", help="registry model")
    hardware: str = option("summit", help="summit, paper-p100, dgx-a100, dgx-h100 or local")
    world_size: tuple[int, ...] | None = option(
        None, help="processes, one per GPU: 48, or a list 48,384 (default: one node)", low=1
    )
    batch_per_gpu: int | None = option(
        None, help="clips per GPU (8, or the --measured run's)", low=1
    )
    epochs: float = option(100.0, help="epochs", above=0)
    epoch_clips: int = option(240_000, help="clips per epoch", low=1)
    frames: int | None = option(None, help="frames per clip (default: the model's)", low=1)
    step_time: float | None = option(None, help="measured s per step, one GPU, no comm", above=0)
    data_time: float | None = option(
        None, help="loader s per clip per GPU (hidden, or --measured's wait)", low=0
    )
    bandwidth_gbps: float | None = option(None, help="achieved Gb/s per node (network)", above=0)
    latency_us: float | None = option(None, help="network hop latency", low=0)
    gpus_per_node: int | None = option(None, help="GPUs per node (the hardware's)", low=1)
    bucket_cap_mb: float | None = option(None, help="DDP bucket / Horovod fusion, MB", above=0)
    grad_dtype: Literal["fp32", "bf16", "fp16"] = option("fp32", help="gradients' all-reduce type")
    framework: Literal["ddp", "horovod"] | None = option(
        None, help="gradient all-reduce framework (the hardware's)"
    )

    def request(self, gpus: int | None) -> Any:
        """The planner's `PlanRequest` on `gpus` GPUs (None: one whole node)."""
        from vidscale.planner.capacity import PlanRequest

        _check_model("--model", self.model)
        return PlanRequest(
            model=self.model,
            hardware=self.hardware,
            gpus=gpus,
            batch_per_gpu=self.batch_per_gpu or 8,
            epochs=self.epochs,
            clips=self.epoch_clips,
            frames=self.frames,
            step_time=self.step_time,
            data_time=self.data_time,
            bandwidth_gbps=self.bandwidth_gbps,
            latency_us=self.latency_us,
            gpus_per_node=self.gpus_per_node,
            bucket_mb=self.bucket_cap_mb,
            framework=self.framework,
            grad_dtype=self.grad_dtype,
        )


def _plan_request(args: argparse.Namespace, opts: PlanOptions, gpus: int | None) -> Any:
    """The request of the flags; with --measured, the file's inputs where no flag gives them."""
    from vidscale.planner.capacity import with_measured
    from vidscale.planner.measured import read_measured

    req = opts.request(gpus)
    if args.measured is None:
        return req
    measured = read_measured(args.measured, opts.model)
    return with_measured(req, measured, keep_batch=opts.batch_per_gpu is not None)


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
    opts = config_from_args(PlanOptions, args)
    if args.target is not None and (args.compare or opts.world_size is not None):
        raise ConfigError(
            "--target finds the GPU count itself: leave out --world-size and --compare"
        )
    gpus = opts.world_size or (None,)  # default: one whole node of the hardware
    req = _plan_request(args, opts, gpus[0])
    for warning in capacity.measured_warnings(req):
        print(f"vidscale plan: warning: {warning}", file=sys.stderr)
    out: Any
    if args.target is not None:
        found = capacity.gpus_for_target(req, args.target)
        out = plan_report.target_as_dict(found)
        text = plan_report.format_target(found)
    elif args.compare or len(gpus) > 1:
        models = tuple(args.compare or (opts.model,))
        for name in models:
            _check_model("--compare", name)
        counts = opts.world_size or capacity.default_gpu_counts(req)
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
    add_config_flags(p, PlanOptions)
    add_renamed(p, "--clips", "--epoch-clips")
    add_renamed(p, "--bucket-mb", "--bucket-cap-mb")
    p.add_argument("--target", type=_duration, default=None, help="fewest GPUs for this time: 15m")
    p.add_argument(
        "--compare", type=_name_list(), default=None, metavar="MODEL,...", help="side by side"
    )
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
