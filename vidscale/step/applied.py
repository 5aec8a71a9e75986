"""Whether the steps a bench timed trained: a step whose loss or gradients were not finite is
skipped (no update, `step.run.train_step`), and its time is that of a step that trains nothing.

A bench counts its measured steps that applied their update (`AppliedSteps`) and reports the
count with its row; a row none of whose measured steps applied is refused (`NothingTrained`),
not recorded: bf16 I3D on a CPU whose bf16 convolution kernel gave NaN gradients was once timed
this way, every step skipped, its AAVG averagings a third lighter (no momentum to average), and
the planner scored against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from vidscale.errors import InputError
from vidscale.step.run import StepResult


class NothingTrained(InputError):
    """None of a bench row's measured steps applied an update: its times are refused."""


@dataclass
class AppliedSteps:
    """Measured steps, how many applied their update, and what the first skipped one saw first
    (`StepResult.nonfinite`)."""

    measured: int = 0
    applied: int = 0
    first_nonfinite: str = ""

    def add(self, result: StepResult) -> None:
        self.measured += 1
        self.applied += result.applied
        if not result.applied and not self.first_nonfinite:
            self.first_nonfinite = result.nonfinite or "something on another rank"

    def check(self, row: str) -> None:
        """Raise `NothingTrained` naming `row` when steps were measured and none applied."""
        if self.measured and not self.applied:
            raise NothingTrained(
                f"{row}: none of its {self.measured} measured steps applied an update (first "
                f"not finite: {self.first_nonfinite}), so its times are of steps that train "
                "nothing; not recorded"
            )
