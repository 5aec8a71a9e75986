"""A command's flags derived from its config dataclass (a bench's, a study's spec), and the config
built back from them.

`add_config_flags(p, Config, skip=...)` adds one flag per field (`bench.options.option`):
`--field-name` (or the field's `flag`), its type from the annotation (`int`, `float`, `str`,
`Path`, `bool` as a switch, a `Literal` or the field's `choices` as choices, `X | None` as
`X`, `tuple[X, ...]` as a comma-separated list, `tuple[X, X]` as exactly two), its help from
the field's `help` with the default appended. Every derived flag's argparse default is None,
"the config's": so `config_from_args(Config, args, base=...)` keeps `base`'s value (default: `Config()`'s) for
each flag not given, then checks the result (`check_options`), raising `InputError` naming the
flag. A field the command sets another way is named in `skip`.

`add_output_flags(p, out_json=...)` adds what every bench takes besides its config: where the
JSON goes, `--json`, and the device. `add_renamed(p, old, new)` keeps a retired spelling as an
error naming its successor.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar

from vidscale.bench.options import CHOICES, HELP, check_options, flag_name
from vidscale.cli.output import add_json_flag

C = TypeVar("C")

DEVICES = ("auto", "cpu", "cuda")

__all__ = [
    "DEVICES",
    "add_config_flags",
    "add_output_flags",
    "add_renamed",
    "config_fields",
    "config_from_args",
    "format_default",
]


def config_fields(cls: type, *, skip: Collection[str] = ()) -> list[dataclasses.Field[Any]]:
    """The fields of dataclass `cls` that have a flag: all but those in `skip`."""
    unknown = set(skip) - {f.name for f in dataclasses.fields(cls)}
    if unknown:  # a stale skip list would hide a field silently
        raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
    return [f for f in dataclasses.fields(cls) if f.name not in skip]


def add_config_flags(p: argparse.ArgumentParser, cls: type, *, skip: Collection[str] = ()) -> None:
    """One flag per field of dataclass `cls` but those in `skip` (module docstring). A field
    without `help` is a `TypeError`: every flag says what it sets."""
    hints = typing.get_type_hints(cls)
    for f in config_fields(cls, skip=skip):
        if HELP not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name}: declare it with bench.options.option")
        flag = flag_name(f)
        kind: dict[str, Any] = {"metavar": flag[2:].upper().replace("-", "_")}
        kind |= _argument(hints[f.name], f.metadata.get(CHOICES))
        kind = {k: v for k, v in kind.items() if v is not None}  # None: argparse's own metavar
        default = _default(f)
        unset = default is None or default is False or default in ((), "")  # 0 is shown
        shown = "" if unset else f" ({format_default(default)})"
        p.add_argument(flag, dest=f.name, default=None, help=f"{f.metadata[HELP]}{shown}", **kind)


def config_from_args(
    cls: type[C], args: argparse.Namespace, *, skip: Collection[str] = (), base: C | None = None
) -> C:
    """`base` (default: `cls()`) with every flag `add_config_flags(p, cls, skip=skip)` derived
    that the command line gave, checked (`check_options`: `InputError` naming the flag)."""
    given = {
        f.name: getattr(args, f.name)
        for f in config_fields(cls, skip=skip)
        if getattr(args, f.name) is not None
    }
    start: Any = base if base is not None else cls()
    cfg: C = dataclasses.replace(start, **given)
    check_options(cfg)
    return cfg


def add_plot_flag(p: argparse.ArgumentParser) -> None:
    """`--plot`, by default beside the JSON (`plot_path`)."""
    p.add_argument("--plot", type=Path, default=None, help="(--out-json's path, ending .png)")


def plot_path(args: argparse.Namespace) -> Path:
    """`--plot`, or `--out-json`'s path ending .png: a result and its plot stay together,
    wherever the JSON is written."""
    plot: Path | None = args.plot
    return plot if plot is not None else Path(args.out_json).with_suffix(".png")


def add_output_flags(p: argparse.ArgumentParser, *, out_json: str, device: bool = True) -> None:
    """`--out-json` (default `out_json`), `--json` and, with `device`, `--device`."""
    p.add_argument("--out-json", type=Path, default=Path(out_json), help=f"({out_json})")
    add_json_flag(p)
    if device:
        p.add_argument("--device", choices=DEVICES, default="auto", help="(auto)")


def add_renamed(p: argparse.ArgumentParser, old: str, new: str) -> None:
    """`old`, a retired spelling of `new`, ends the command with one line naming `new` (rather
    than argparse's "unrecognized arguments", or a prefix of `new` silently accepted)."""

    class Renamed(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
            parser.error(f"{old} is now {new}")

    # Its own dest, never set: `--top`'s default would be `--topk`'s `top`, overwriting it.
    dest = "retired" + old.replace("-", "_")
    p.add_argument(
        old, action=Renamed, nargs="?", dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


def format_default(value: Any) -> str:
    """A default as a person writes it on the command line: a tuple comma-joined, None as
    `none`."""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return "none" if value is None else str(value)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _argument(hint: Any, choices: tuple[str, ...] | None) -> dict[str, Any]:
    """argparse's `type`/`choices`/`action` for a field of type `hint`."""
    hint = _optional_of(hint)
    if hint is bool:
        return {"action": "store_true", "metavar": None}  # a switch shows no value
    if typing.get_origin(hint) is tuple:
        item, *rest = typing.get_args(hint)
        if rest != [Ellipsis]:
            if any(other is not item for other in rest):
                raise TypeError(f"no flag for a tuple of mixed types {hint}")
            return {"type": _fixed_list(_scalar(item), 1 + len(rest))}
        names = _choices(item) or choices
        listed = {"metavar": ",".join(names)} if names else {}
        return {"type": _comma_list(_scalar(item), names), **listed}
    names = _choices(hint) or choices
    if names:
        return {"choices": names, "metavar": None}
    return {"type": _scalar(hint)}


def _optional_of(hint: Any) -> Any:
    """`X` of `X | None`; any other hint as it is."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        kinds = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(kinds) == 1:
            return kinds[0]
    return hint


def _choices(hint: Any) -> tuple[str, ...] | None:
    return tuple(typing.get_args(hint)) if typing.get_origin(hint) is Literal else None


def _scalar(hint: Any) -> Callable[[str], Any]:
    """The parser of one value: the bounds are checked on the config, naming the flag."""
    if typing.get_origin(hint) is Literal or hint is str:
        return str
    if hint in (int, float, Path):
        return _parse(hint)
    raise TypeError(f"no flag for a field of type {hint}")


def _parse(kind: type) -> Callable[[str], Any]:
    words = {int: "an integer", float: "a number", Path: "a path"}

    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {words[kind]}, got {text!r}") from None

    return parse


def _fixed_list(one: Callable[[str], Any], count: int) -> Callable[[str], tuple[Any, ...]]:
    """Exactly `count` comma-separated values (`1,1.5`), in order, repeats kept."""

    def parse(text: str) -> tuple[Any, ...]:
        items = [item.strip() for item in text.split(",")]
        if len(items) != count or not all(items):
            raise argparse.ArgumentTypeError(
                f"expected {count} comma-separated values, got {text!r}"
            )
        return tuple(one(item) for item in items)

    return parse


def _comma_list(
    one: Callable[[str], Any], choices: tuple[str, ...] | None
) -> Callable[[str], tuple[Any, ...]]:
    """Comma-separated values (`8,16,32`), repeats dropped, order kept; none may be empty, and
    each is one of `choices` when given."""

    def parse(text: str) -> tuple[Any, ...]:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"empty item in {text!r}")
        unknown = [item for item in items if choices is not None and item not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {unknown[0]!r} in {text!r}; choose from {','.join(choices or ())}"
            )
        return tuple(dict.fromkeys(one(item) for item in items))

    return parse
