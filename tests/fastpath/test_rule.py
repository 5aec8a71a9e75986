"""The fast path's rule on given numbers: clear wins taken, slower or noisy ones not, bursts
that favour a candidate in a few rounds not, drift cancelled, ties to exact arithmetic."""

from __future__ import annotations

import random

import pytest

from vidscale.fastpath.rule import choose, hopeless, rounds_needed


def test_a_clear_win_is_taken_and_a_slower_fast_path_is_not() -> None:
    fp32 = [1.00, 1.10, 0.95, 1.05, 1.00]
    faster = choose({"fp32": fp32, "bf16+cl": [t / 1.4 for t in fp32]})
    assert faster.chosen == "bf16+cl" and "bf16+cl 1.40x fp32" in faster.reason
    assert "faster in 5/5 rounds" in faster.reason
    assert faster.measured["bf16+cl"].speedup == pytest.approx(1.4)
    assert faster.measured["fp32"].speedup == 1.0
    # The demo's shape on the 2-core AMX CPU: bf16 + channels-last at 0.71x fp32.
    slower = choose({"fp32": fp32, "bf16+cl": [t / 0.71 for t in fp32]})
    assert slower.chosen == "fp32" and "ties go to fp32" in slower.reason


def test_a_gain_within_the_noise_goes_to_fp32() -> None:
    fp32 = [1.0] * 5
    noisy = [1 / 1.30, 1 / 0.85, 1 / 1.05, 1 / 1.25, 1 / 0.95]  # median 1.05x, IQR 0.30
    assert choose({"fp32": fp32, "bf16": noisy}).chosen == "fp32"
    steady_but_tiny = [1 / 1.01] * 5  # no noise at all, but under MIN_GAIN
    assert choose({"fp32": fp32, "bf16": steady_but_tiny}).chosen == "fp32"
    assert choose({"fp32": fp32, "bf16": steady_but_tiny}, min_gain=0.0).chosen == "bf16"


def test_a_win_in_only_some_rounds_is_not_taken() -> None:
    # Bursts of contention that happened to hit fp32 in three rounds: a 2x median speedup with
    # an interquartile range below it, but faster in only 3 of 5 rounds (a coin does that half
    # the time): not evidence.
    fp32 = [1.0] * 5
    bursty = [1 / 2.5, 1 / 2.2, 1 / 2.0, 1 / 0.5, 1 / 0.9]
    choice = choose({"fp32": fp32, "fp32+cl": bursty})
    assert choice.measured["fp32+cl"].speedup == pytest.approx(2.0)
    assert choice.measured["fp32+cl"].faster_rounds == 3
    assert choice.chosen == "fp32" and "faster in 3/5 rounds" in choice.reason
    # Ten rounds (two ranks pooled): 9 of 10 is enough, 8 of 10 is not.
    assert (rounds_needed(4), rounds_needed(5), rounds_needed(10)) == (None, 5, 9)
    nine = [1 / 1.3] * 9 + [1 / 0.9]
    assert choose({"fp32": [1.0] * 10, "bf16": nine}).chosen == "bf16"
    eight = [1 / 1.3] * 8 + [1 / 0.9] * 2
    assert choose({"fp32": [1.0] * 10, "bf16": eight}).chosen == "fp32"


def test_fewer_than_five_rounds_never_leave_the_reference() -> None:
    assert choose({"fp32": [1.0] * 4, "bf16": [0.1] * 4}).chosen == "fp32"


def test_drift_that_hits_every_candidate_alike_cancels() -> None:
    # Round 3 ran while something else held the cores: twice as slow, for both candidates.
    fp32 = [1.0, 1.0, 2.0, 1.0, 1.0]
    bf16 = [t / 1.2 for t in fp32]
    choice = choose({"fp32": fp32, "bf16": bf16})
    assert choice.chosen == "bf16" and choice.measured["bf16"].noise == pytest.approx(0.0)


def test_ties_go_to_exact_arithmetic_then_the_fastest_bf16_that_beats_it() -> None:
    fp32 = [1.0] * 5
    cl = [1 / 1.30] * 5
    tie = {"fp32": fp32, "fp32+cl": cl, "bf16": [1 / 1.10] * 5, "bf16+cl": [1 / 1.31] * 5}
    assert choose(tie).chosen == "fp32+cl"  # bf16+cl is 1.008x fp32+cl: within MIN_GAIN
    win = {**tie, "bf16+cl": [1 / 1.80] * 5, "bf16": [1 / 1.70] * 5}
    choice = choose(win)
    assert choice.chosen == "bf16+cl"
    assert choice.reason.startswith("fp32+cl 1.30x fp32")
    assert "bf16+cl 1.38x fp32+cl" in choice.reason


def test_with_bf16_set_explicitly_the_reference_is_its_default_layout() -> None:
    choice = choose({"bf16+cl": [1 / 1.01] * 5, "bf16": [1.0] * 5})
    assert (choice.reference, choice.chosen) == ("bf16", "bf16")
    assert choose({"bf16+cl": [1 / 1.5] * 5, "bf16": [1.0] * 5}).chosen == "bf16+cl"


def test_the_rule_refuses_samples_it_cannot_compare() -> None:
    with pytest.raises(ValueError, match="same number"):
        choose({"fp32": [1.0, 1.0], "bf16": [1.0]})
    with pytest.raises(ValueError, match="finite and positive"):
        choose({"fp32": [1.0], "bf16": [0.0]})
    with pytest.raises(ValueError, match="not a fast-path setting"):
        choose({"fp32": [1.0], "fp16": [1.0]})


# -- stopping early: `hopeless` ------------------------------------------------------------------


def test_one_round_lost_rules_a_candidate_out_of_five_and_two_out_of_ten() -> None:
    fp32, slower = [1.0, 1.0], [1.1, 0.9]  # lost round 1, won round 2
    alone = hopeless({"fp32": fp32[:1], "bf16": slower[:1]}, total_rounds=5)
    assert list(alone) == ["bf16"]
    assert alone["bf16"] == (
        "0.91x fp32, stopped after 1 of 5 rounds: not faster than fp32 in 1/1, needs 5"
    )
    # Two ranks pool 10 rounds, 9 needed: one lost round leaves it in, a second does not.
    assert hopeless({"fp32": fp32, "bf16": slower}, total_rounds=10) == {}
    assert list(hopeless({"fp32": fp32 * 2, "bf16": slower * 2}, total_rounds=10)) == ["bf16"]
    # Faster in every round so far: never ruled out, however few rounds are left.
    assert hopeless({"fp32": fp32, "bf16": [0.5, 0.5]}, total_rounds=5) == {}


def test_the_reference_is_never_ruled_out_and_too_few_rounds_rule_out_the_rest() -> None:
    assert hopeless({"fp32": [9.0], "fp32+cl": [1.0]}, total_rounds=5) == {}
    few = hopeless({"fp32": [1.0], "fp32+cl": [0.1], "bf16": [0.1]}, total_rounds=4)
    assert list(few) == ["fp32+cl", "bf16"] and "so few cannot show a gain" in few["bf16"]


def test_a_bf16_candidate_stays_while_an_fp32_one_it_beats_can_still_be_taken() -> None:
    # 10 rounds in all. bf16 lost both rounds to fp32 (out against fp32), but fp32+cl, which
    # lost only one round to fp32, may still be taken, and bf16 lost just one round to it.
    samples = {"fp32": [1.0, 1.0], "fp32+cl": [1.2, 0.5], "bf16": [1.1, 1.05]}
    assert hopeless(samples, total_rounds=10) == {}
    # fp32+cl loses a second round: it is out, and with it bf16's last way in.
    worse = {"fp32": [1.0] * 3, "fp32+cl": [1.2, 0.5, 1.3], "bf16": [1.1, 1.05, 1.2]}
    out = hopeless(worse, total_rounds=10)
    assert list(out) == ["fp32+cl", "bf16"]
    assert "not faster than fp32 in 3/3, needs 9" in out["bf16"]


def test_what_is_ruled_out_is_never_chosen_and_leaving_it_out_changes_nothing() -> None:
    """Random timings (each candidate a random speed with per-round noise and contention
    bursts): at every round, whatever `hopeless` rules out is not what `choose` takes from all
    the rounds, and `choose` without the ruled-out candidates takes the same setting."""
    rng = random.Random(7)
    labels = ["fp32", "fp32+cl", "bf16", "bf16+cl"]
    checked = taken = 0
    for _ in range(400):
        rounds = rng.choice([5, 10])
        speed = {label: rng.uniform(0.8, 1.25) for label in labels}
        samples = {
            label: [
                rng.uniform(0.97, 1.03) * rng.choice([1.0, 1.0, 1.0, 1.3]) / speed[label]
                for _ in range(rounds)
            ]
            for label in labels
        }
        chosen = choose(samples).chosen
        taken += chosen != "fp32"
        out: dict[str, str] = {}
        for r in range(1, rounds + 1):
            live = {k: v[:r] for k, v in samples.items() if k not in out}
            out |= hopeless(live, total_rounds=rounds)
            assert chosen not in out
            checked += len(out)
        rest = {k: v for k, v in samples.items() if k not in out}
        assert choose(rest).chosen == chosen
    assert checked > 1000 and taken > 50  # both outcomes were exercised
