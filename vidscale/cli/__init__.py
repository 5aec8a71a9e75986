"""The `vidscale` command: parse, load a recipe, apply `--set` overrides, call one function.

Bad input of any command (a flag, a config field, an annotation line, a missing or unreadable
file or video) ends it with one line `vidscale: error: ...` on stderr and exit status 2;
`vidscale --debug COMMAND ...` shows the traceback instead.

One module per command group, each with its parsers and commands: `train_cmds` (with `ft_cmd`,
`train-ft`: one replica group of a fault-tolerant run), `study_cmds`,
`data_cmds` (`synth`, `prepare`), `eval_cmds` (`eval`, `predict`, `export`; `eval_format` writes
`eval`'s lines, `timeline_cmd` `predict --window`), `feature_cmds`, `import_cmds`, `info_cmds`,
`plan_cmd`, `bench_cmds` (with `bench_gpu_cmds`, `bench_network_cmd` and `bench_cluster_cmd`).
Shared: `args` (the config flags, `resolve_config`, the checks commands run first), `flags` (a bench's flags derived
from its config dataclass), `output` (lines for a person, `--json` for machines). `reference` generates docs/cli.md and docs/config.md from the parsers and
the config dataclasses.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from vidscale.cli import (
    bench_cmds,
    data_cmds,
    eval_cmds,
    feature_cmds,
    ft_cmd,
    import_cmds,
    info_cmds,
    plan_cmd,
    study_cmds,
    train_cmds,
)
from vidscale.cli.args import resolve_config
from vidscale.errors import InputError

__all__ = ["build_parser", "main", "resolve_config"]

DESCRIPTION = """\
Train, evaluate and use video action-recognition models (TSM, TSN, I3D, SlowFast on a ResNet
trunk), on one laptop CPU or on many GPUs with torchrun, from named recipes that reproduce the
papers' runs.

A first run, on the built-in demo data:
  vidscale synth --out demo_data
  vidscale train --recipe demo_tsm_r18_8f_b32_e12 --data demo_data --out runs/demo_tsm
  vidscale eval runs/demo_tsm
  vidscale predict runs/demo_tsm demo_data/videos/val/moving_left/moving_left_0000.mp4
On N processes or GPUs: `torchrun --standalone --nproc_per_node N -m vidscale train ...`.

The main commands: `prepare` turns a downloaded dataset into frame shards, `train` trains a
recipe, `eval` scores a run, `predict` classifies one video, `export` writes a deployable
model, `recipes` lists the named runs, and `plan` predicts the time to train on N GPUs.
`study NAME` and `bench NAME` reproduce the papers' experiments on this machine.

One spelling per idea: a run is the positional RUN and `--checkpoint` picks one of its files
(last, best, epoch_NNNN); a list-valued flag is comma-separated (`--nproc 1,2,4`); `--nproc`
counts the processes a command starts, `--world-size` those of a run it describes; the fast
path is `--fast-path` (auto, fp32, fp32+cl, bf16, bf16+cl). Every command prints for a person;
with `--json` it prints one JSON document instead. Bad input ends a command with one line
`vidscale: error: ...` and exit status 2.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vidscale",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--debug", action="store_true", help="on an error, show its traceback instead of one line"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # In `vidscale --help` order: a user's path from data to a trained model first.
    data_cmds.add_parsers(sub)
    train_cmds.add_parsers(sub)
    ft_cmd.add_parsers(sub)
    eval_cmds.add_parsers(sub)
    feature_cmds.add_parsers(sub)
    import_cmds.add_parsers(sub)
    info_cmds.add_parsers(sub)
    plan_cmd.add_parsers(sub)
    study_cmds.add_parsers(sub)
    bench_cmds.add_parsers(sub)
    _no_abbreviations(parser)
    return parser


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Every flag must be spelled in full, in every command: argparse otherwise takes a prefix
    of a longer flag, so a flag that no longer exists (`plan --gpus`, now `--world-size`) was
    silently read as another one (`--gpus-per-node`)."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _no_abbreviations(child)


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

    Bad input prints one line `vidscale: error: ...` on stderr and returns 2: vidscale's own
    `InputError` (a config field or flag, `ConfigError`; an annotation file, `AnnotationError`;
    any other value a check rejects), an undecodable video (`DecodeError`), a missing,
    unreadable or unwritable path (`OSError`). With `--debug` it is re-raised instead,
    traceback included. Ctrl-C returns 130 without a traceback. Other exceptions, a plain
    `ValueError` included, are bugs and propagate with their traceback.
    """
    args = build_parser().parse_args(argv)
    from vidscale.data.media.decode import DecodeError

    bad_input = (InputError, DecodeError, OSError)
    from vidscale.train.survival.resilience import PREEMPTED_EXIT_CODE, Diverged, Preempted

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
