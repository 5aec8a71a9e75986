"""Shared argument handling: argparse types, the config flags and `resolve_config`, and the
checks of paths, models and devices that commands run before their work."""

from __future__ import annotations

import argparse
import typing
from collections.abc import Callable, Sequence
from pathlib import Path

from vidscale.bench.options import SETTINGS
from vidscale.config import (
    ConfigError,
    Precision,
    RunConfig,
    load_config,
    read_config_file,
    resolve,
)


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
    """The recipe, or the config file of `--config` (a run's `config.json`, or what `vidscale
    recipes NAME --json` wrote), or without either the saved config of the run in `run_dir`;
    then --data and --set on top, validated (`config.resolve`).

    A re-run of the same command therefore resolves to the same config, and `vidscale train
    --out RUN` alone continues RUN with its own settings. `--config` with `--recipe` is refused.
    """
    from vidscale.recipes import get_recipe

    config_file: Path | None = getattr(args, "config", None)
    saved = run_dir / "config.json" if run_dir is not None else None
    if config_file is not None and args.recipe:
        raise ConfigError("--config and --recipe: give one of them, not both")
    if config_file is not None:
        cfg = read_config_file(config_file)
    elif args.recipe:
        cfg = get_recipe(args.recipe)
    elif saved is not None and saved.exists():
        cfg = load_config(saved)
    else:
        raise ConfigError("--recipe or --config is required (see `vidscale recipes`)")
    return resolve(cfg, list(_with_data_root(args)))


# -- argparse types ----------------------------------------------------------------------------


def add_precision_flag(p: argparse.ArgumentParser) -> None:
    """`--precision`: one flag with one meaning in every command that scores videos
    (`scoring.precision`)."""
    p.add_argument(
        "--precision",
        choices=typing.get_args(Precision),
        default="fp32",
        help="arithmetic of the scores: fp32 (default) or bf16 autocast, whatever the run "
        "trained in",
    )


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
    from vidscale.planner.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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


def _name_list(choices: Sequence[str] | None = None) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: comma-separated names (e.g. `tsm_resnet50,i3d_resnet50_3x1x1`), each one
    of `choices` when given; a list-valued flag is always written this way."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(","))
        if not all(names):
            raise argparse.ArgumentTypeError(f"empty name in {text!r}")
        unknown = [n for n in names if choices is not None and n not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {unknown[0]!r} in {text!r}; choose from {','.join(choices or ())}"
            )
        return tuple(dict.fromkeys(names))

    return parse


# The fast-path settings a flag can name: `auto` (what training's probe chooses), plain fp32,
# and the candidates the probe times (`fastpath.settings.Candidate` labels).
FAST_PATH_SETTINGS = ("auto", *SETTINGS)


def _fast_path_per_model(text: str) -> tuple[str, ...]:
    """An argparse type: `--fast-path` of a command that times several models: one setting for
    all (`bf16+cl`) or `MODEL=SETTING` entries, comma-separated."""
    entries = tuple(e.strip() for e in text.split(","))
    for entry in entries:
        setting = entry.partition("=")[2] if "=" in entry else entry
        if setting not in FAST_PATH_SETTINGS or entry.startswith("="):
            raise argparse.ArgumentTypeError(
                f"{entry!r}: expected SETTING or MODEL=SETTING, SETTING one of "
                f"{', '.join(FAST_PATH_SETTINGS)}"
            )
    if len(entries) > 1 and any("=" not in e for e in entries):
        raise argparse.ArgumentTypeError(
            f"{text!r}: one SETTING for every model, or MODEL=SETTING entries, not both"
        )
    return entries


def _weights(text: str) -> tuple[float, float]:
    """`--weights 1,1.5`: two fusion weights >= 0, not both 0."""
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 2 or min(parts) < 0 or sum(parts) <= 0:
        raise argparse.ArgumentTypeError(f"expected two weights RGB,FLOW >= 0, got {text!r}")
    return parts[0], parts[1]


def _width_x_height(text: str) -> tuple[int, int]:
    """An argparse type: `WIDTHxHEIGHT` in pixels, each >= 16 (e.g. `340x256`)."""
    w, sep, h = text.lower().partition("x")
    if not (sep and w.isdigit() and h.isdigit() and int(w) >= 16 and int(h) >= 16):
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, each >= 16, got {text!r}")
    return int(w), int(h)


def _flow_method_list(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated optical flow methods (e.g. `dis,tvl1`)."""
    from vidscale.data.media.flow import FLOW_METHODS

    names = tuple(text.split(","))
    unknown = [n for n in names if n not in FLOW_METHODS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown method {unknown[0]!r} in {text!r}; choose from {','.join(FLOW_METHODS)}"
        )
    return names


# -- checks before a command's work ------------------------------------------------------------


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
