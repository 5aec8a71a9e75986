"""`vidscale info`, `models`, `recipes` and `schedule`: what a model, the registry or a recipe
holds, printed without training. Their parsers and commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from vidscale.cli.args import _at_least, _check_model
from vidscale.cli.output import add_json_flag, print_json, print_result
from vidscale.config import ConfigError


def cmd_info(args: argparse.Namespace) -> int:
    from vidscale.bench.compute.flops import format_info, info_as_dict, model_info
    from vidscale.models.registry import ModelConfig, default_frames, default_num_classes

    _check_model("NAME", args.name)
    frames = args.frames or default_frames(args.name)
    num_classes = args.num_classes or default_num_classes(args.name)
    cfg = ModelConfig(name=args.name, num_classes=num_classes, frames=frames)
    info = model_info(cfg, frames=frames, size=args.size)
    print_result(info_as_dict(info), as_json=args.json, text=format_info(info))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from vidscale.models.registry import list_models

    names = list_models()
    print_result(names, as_json=args.json, text="\n".join(names))
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    from vidscale.config import resolve, to_dict
    from vidscale.recipes import DOCS, get_recipe, list_recipes
    from vidscale.run.timeline import recipe_row

    if args.json and args.filter in list_recipes():
        # One recipe by its name: its whole config, the file `vidscale train --config` reads.
        print_json(to_dict(resolve(get_recipe(args.filter), [])))
        return 0
    names = [n for n in list_recipes() if not args.filter or args.filter in n]
    rows = []
    for n in names:
        try:
            row = recipe_row(
                n, get_recipe(n), world_size=args.world_size, train_size=args.dataset_size
            )
        except ConfigError as err:  # a recipe this process count cannot run: say why, go on
            row = {"recipe": n, "error": str(err)}
        rows.append({**row, "about": DOCS[n]})
    if args.json:
        print_json(rows)
        return 0
    print(f"{args.dataset_size:,} training videos on {args.world_size} process(es)")
    width = max([32, *(len(str(r["recipe"])) for r in rows)])
    head = f"{'recipe':{width}s} {'GPUs':>5s} {'accum':>5s} {'batch':>7s} {'lr':>8s} "
    head += f"{'warmup':>7s} {'steps/ep':>8s} {'epochs':>6s}  about"
    print(head)
    for r in rows:
        if "error" in r:
            print(f"{r['recipe']:{width}s} (not on {args.world_size} processes: {r['error']})")
            continue
        print(
            f"{r['recipe']:{width}s} {r['recipe_gpus']:5d} {r['accumulate']:5d} "
            f"{r['global_batch']:7,d} {r['lr']:8.4g} {r['warmup_steps']:7d} "
            f"{r['steps_per_epoch']:8d} {r['epochs']:6d}  {r['about']}"
        )
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from vidscale.config import resolve
    from vidscale.recipes import get_recipe
    from vidscale.train.schedule_report import schedule_report

    cfg = resolve(get_recipe(args.recipe), args.overrides)
    report = schedule_report(cfg, world_size=args.world_size, train_size=args.dataset_size)
    if args.csv is not None:
        report.write_csv(args.csv)
    if args.json:
        print_json(
            {
                "recipe": args.recipe,
                "world_size": args.world_size,
                "dataset_size": args.dataset_size,
                "epochs": report.timeline.epochs,
                "total_steps": report.timeline.total_steps,
                "rows": report.rows,
                "phases": report.timeline.phases,
                "savings": report.savings,
                "csv": args.csv,
            }
        )
        return 0
    print(f"{args.recipe} on {args.world_size} process(es), {args.dataset_size:,} training videos")
    print(report.text())
    if args.csv is not None:
        print(f"wrote {args.csv}")
    return 0


def _add_run_size(p: argparse.ArgumentParser) -> None:
    """--world-size and --dataset-size: the run a recipe or schedule is resolved for."""
    p.add_argument("--world-size", type=_at_least(1), default=1, help="processes the run would use")
    p.add_argument(
        "--dataset-size",
        type=_at_least(1),
        default=240_000,
        help="training videos (default: about Kinetics-400's training split)",
    )


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `info`, `models`, `recipes` and `schedule` sub-commands, in `vidscale --help` order."""
    p = sub.add_parser("info", help="parameters and multiply-accumulates of a model")
    p.add_argument("name")
    p.add_argument(
        "--num-classes", type=_at_least(1), default=None, help="default: 400 video, 1000 image"
    )
    p.add_argument("--frames", type=_at_least(0), default=0, help="0: the model's default")
    p.add_argument("--size", type=_at_least(32), default=224)
    add_json_flag(p)
    p.set_defaults(fn=cmd_info)

    p = sub.add_parser("models", help="list registered models")
    add_json_flag(p)
    p.set_defaults(fn=cmd_models)

    p = sub.add_parser(
        "recipes",
        help="list named recipes with their resolved batch and LR",
        description="List named recipes with their resolved batch and LR. With --json, a "
        "recipe's exact name prints its full config instead, the JSON file `vidscale train "
        "--config FILE` reads: `vidscale recipes demo_tsm_r18_8f_b32_e12 --json > my.json`.",
    )
    p.add_argument("filter", nargs="?", default="", help="only names containing this")
    _add_run_size(p)
    add_json_flag(
        p,
        help="print one JSON document on stdout: the listed rows, or for an exact recipe "
        "name its full config (a file for `vidscale train --config`)",
    )
    p.set_defaults(fn=cmd_recipes)

    p = sub.add_parser("schedule", help="a recipe's run epoch by epoch (multigrid stages, LR)")
    p.add_argument("recipe", help="named recipe (see `vidscale recipes`)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    _add_run_size(p)
    p.add_argument("--csv", type=Path, default=None, help="also write the per-epoch table here")
    add_json_flag(p)
    p.set_defaults(fn=cmd_schedule)
