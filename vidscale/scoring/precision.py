"""The arithmetic every score is computed in: fp32 unless bf16 is asked for.

One rule for everything that scores videos: the trainer's per-epoch evaluation
(`train.eval_precision`), `eval` (one run or `--two-stream`), `predict` (whole video or
`--window`) and `extract-features` (`--precision`), and the export check (always fp32). A score
is therefore the same number whichever command produced it and whatever arithmetic the run
trained in: a run trained under bf16 autocast is still scored in fp32 unless bf16 is asked for.
Only the arithmetic is ruled here; a model's memory layout (channels-last) changes no result
beyond rounding order and may stay as the run recorded it, for speed.

bf16 asked for on a device without bf16 units runs as autocast emulates it there: the same
arithmetic, slower; `Arithmetic.note` says so in one line. Every report names the precision
its numbers came from (`Arithmetic.report`).
"""

from __future__ import annotations

import contextlib
import sys
import typing
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from vidscale.config import Precision
from vidscale.fastpath.settings import device_has_bf16

PRECISIONS: tuple[Precision, ...] = typing.get_args(Precision)
# Reports record only the precision: an emulated bf16 gives the numbers a native one gives.
EMULATED = (
    "this device has no bf16 units, so bf16 autocast is emulated: the same arithmetic, slower"
)


@dataclass(frozen=True)
class Arithmetic:
    """How scores are computed: `precision` on a device of type `device_type`; `emulated` when
    bf16 was asked for where the device has no bf16 units."""

    precision: Precision
    device_type: str = "cpu"
    emulated: bool = False

    def autocast(self) -> Callable[[], AbstractContextManager[Any]]:
        """A factory of the context every scoring forward pass runs in."""
        if self.precision == "fp32":
            return contextlib.nullcontext
        device_type = self.device_type

        def ctx() -> AbstractContextManager[Any]:
            return torch.autocast(device_type=device_type, dtype=torch.bfloat16)

        return ctx

    @property
    def note(self) -> str | None:
        """The one line a command says when bf16 is emulated here, else None."""
        return f"precision bf16: {EMULATED}" if self.emulated else None

    def report(self) -> dict[str, str]:
        """What a report records of it: `{"precision": "fp32" | "bf16"}`."""
        return {"precision": self.precision}

    def describe(self) -> str:
        """For a person: "fp32", or "bf16 autocast"."""
        return "fp32" if self.precision == "fp32" else "bf16 autocast"


FP32 = Arithmetic("fp32")


def scoring_arithmetic(precision: Precision, device: torch.device | str) -> Arithmetic:
    """The arithmetic of scores asked to be in `precision` on `device`. Raises ValueError for a
    precision other than fp32 and bf16 (the CLI and the config offer only those)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    device = torch.device(device)
    emulated = precision == "bf16" and not device_has_bf16(device)
    return Arithmetic(precision, device.type, emulated)


def announce(arithmetic: Arithmetic, *, is_main: bool = True) -> None:
    """Print `arithmetic.note` on stderr (on the main process), when there is one: stdout may
    carry a command's JSON."""
    if is_main and arithmetic.note:
        print(f"vidscale: {arithmetic.note}", file=sys.stderr, flush=True)
