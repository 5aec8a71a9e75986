"""The benches' settings as dataclass fields that carry their command-line flag.

A bench config declares each setting with `option(default, help=..., low=/above=/choices=/
flag=)`: the flag's help, its bounds or choices, and its name where it is not the field's
(`--fast-path` for `setting`). The settings most benches share are declared once here with
their help and check (`batch`, `size`, `frames`, `warmup`, `steps`, `num_classes`,
`peak_size`, `fast_path`), each bench choosing only its default. `check_options(cfg)` checks
a config against those bounds and choices, raising `InputError` naming the flag (`--steps:
must be >= 1, got 0`), for the command line and library callers alike. `vidscale.cli.flags`
derives each bench's flags from the same fields, so a flag, its default, help and check live
in one place.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, TypeVar

from vidscale.errors import InputError

T = TypeVar("T")

# The field metadata keys `option` writes and `check_options` / `vidscale.cli.flags` read.
HELP, FLAG, LOW, ABOVE, CHOICES = "help", "flag", "low", "above", "choices"

# The fast-path settings a bench can fix: the candidates training's probe times, never `auto`
# (a bench on a lent GPU spends no time probing). `fastpath.settings.Candidate` labels.
SETTINGS = ("fp32", "fp32+cl", "bf16", "bf16+cl")


def option(
    default: T,
    *,
    help: str,
    low: float | None = None,
    above: float | None = None,
    choices: Sequence[str] | None = None,
    flag: str | None = None,
) -> T:
    """A dataclass field with `default` and its flag's metadata: `help`, values (each item of a
    tuple) >= `low` or > `above` or among `choices`, and the flag's name without dashes when
    it is not the field's own (`flag="fast-path"`)."""
    metadata: dict[str, Any] = {HELP: help}
    for key, value in ((LOW, low), (ABOVE, above), (FLAG, flag)):
        if value is not None:
            metadata[key] = value
    if choices is not None:
        metadata[CHOICES] = tuple(choices)
    found: T = dataclasses.field(default=default, metadata=metadata)
    return found


def flag_name(f: dataclasses.Field[Any]) -> str:
    """The command-line flag of field `f`: `--peak-size` for `peak_size` unless it names one."""
    return "--" + str(f.metadata.get(FLAG, f.name.replace("_", "-")))


def check_options(cfg: object) -> None:
    """Raise `InputError` naming the flag of the first field of dataclass `cfg` whose value (or
    an item of its tuple) breaks its `option` bounds or choices."""
    assert dataclasses.is_dataclass(cfg) and not isinstance(cfg, type)
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            problem = _problem(f.metadata, item)
            if problem:
                raise InputError(f"{flag_name(f)}: {problem}")


def _problem(metadata: Any, value: Any) -> str:
    """What is wrong with one value under a field's metadata ("" when nothing is)."""
    choices = metadata.get(CHOICES)
    if choices is not None and value not in choices:
        return f"expected one of {', '.join(choices)}, got {value!r}"
    if value is None or isinstance(value, str | bool):
        return ""
    low, above = metadata.get(LOW), metadata.get(ABOVE)
    if low is not None and not value >= low:  # `not >=` also refuses nan
        return f"must be >= {low:g}, got {value}"
    if above is not None and not (value > above and math.isfinite(value)):
        return f"must be > {above:g}, got {value}"
    return ""


# -- the settings most benches share: one help and one check each, the default per bench ----


def batch(default: int, *, help: str = "clips per step") -> int:
    return option(default, help=help, low=1)


def size(default: int = 224) -> int:
    return option(default, help="frame side in pixels (>= 32, the trunk's total stride)", low=32)


def frames(default: int, *, own: bool = True) -> int:
    """Frames per clip; with `own`, 0 stands for each model's own clip length."""
    if own:
        return option(default, help="frames per clip (0: each model's own)", low=0)
    return option(default, help="frames per clip", low=1)


def warmup(default: int, *, low: int = 0, help: str = "untimed steps first") -> int:
    return option(default, help=help, low=low)


def steps(default: int, *, help: str = "timed steps") -> int:
    return option(default, help=help, low=1)


def num_classes(default: int = 400) -> int:
    return option(default, help="classes of the model's head", low=1)


def peak_size() -> int:
    return option(0, help="side of the peak matmul (0: the device's default)", low=0)


def fast_path(default: str = "bf16+cl") -> str:
    return option(default, help="the fast-path setting timed", choices=SETTINGS, flag="fast-path")
