"""`AppliedSteps`: the measured steps that applied their update, and the refusal of a row with
none."""

from __future__ import annotations

import pytest

from vidscale.errors import InputError
from vidscale.step.agreement import StepAgreement
from vidscale.step.applied import AppliedSteps, NothingTrained
from vidscale.step.run import StepResult


def result(*, applied: bool, nonfinite: str = "") -> StepResult:
    agreed = StepAgreement(loss=1.0, hits=0, clips=2, finite=applied, stop=False)
    return StepResult(1.0, 0, 2, 0.0, 1.0, agreed, 0.1, 0.5, 2, [], nonfinite=nonfinite)


def test_counts_applied_steps_and_keeps_the_first_non_finite() -> None:
    counted = AppliedSteps()
    counted.add(result(applied=False, nonfinite="the gradient of a.weight"))
    counted.add(result(applied=True))
    counted.add(result(applied=False, nonfinite="the loss"))
    assert (counted.measured, counted.applied) == (3, 1)
    assert counted.first_nonfinite == "the gradient of a.weight"
    counted.check("row")  # one applied: recorded


def test_a_row_none_of_whose_steps_applied_is_refused_in_one_line() -> None:
    counted = AppliedSteps()
    for _ in range(2):
        counted.add(result(applied=False))  # seen on another rank only
    with pytest.raises(NothingTrained) as refused:
        counted.check("m ddp at bf16")
    assert str(refused.value) == (
        "m ddp at bf16: none of its 2 measured steps applied an update (first not finite: "
        "something on another rank), so its times are of steps that train nothing; not recorded"
    )
    assert isinstance(refused.value, InputError)  # the command line's one-line error
    AppliedSteps().check("nothing measured")  # no steps: nothing to refuse
