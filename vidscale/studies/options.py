"""The settings every study shares, declared once as dataclass fields that carry their flag
(`bench.options.option`): `epochs` and `nproc`, each study choosing only its default, and
`margin`, each saying what it is below. A study's spec (`SweepSpec`, `StudySpec`, ...) declares
its own settings the same way, and `vidscale.cli.flags` derives `vidscale study NAME`'s flags
from the spec's fields: the flag, its default, help and check live in one place.
"""

from __future__ import annotations

from typing import TypeVar

from vidscale.bench.options import option

T = TypeVar("T", int, int | None)


def epochs(default: T) -> T:
    """Epochs of every run; None keeps each recipe's."""
    words = "epochs of every run" + (" (none: the recipe's)" if default is None else "")
    return option(default, help=words, low=1)


def nproc(default: int) -> int:
    return option(default, help="processes of every run (torchrun if > 1)", low=1)


def margin(below: str) -> float:
    """Points below `below` that count as reaching it."""
    return option(1.0, help=f"points below {below} that count as reaching it", low=0)
