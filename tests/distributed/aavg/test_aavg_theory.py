"""Theorems 1 and 2 of the AAVG paper (Cong et al., §III-A): hand values and the proof's claims."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

import pytest

from vidscale.distributed.aavg.theory import (
    AAVGConstants,
    Theorem2Regime,
    best_k,
    bound_fixed_samples,
    g_minimiser,
    theorem1_bound,
    theorem1_min_batch,
    theorem2_coefficients,
    theorem2_f,
    theorem2_f_prime,
    theorem2_g,
    theorem2_g_prime,
    theorem2_preconditions,
    theorem2_regime,
)

# L = 1, γ = 1/2, M = M_G = 1, F_gap = 1, P = 2, B = 4: a = PLγ = 1.
SIMPLE = AAVGConstants(L=1.0, M=1.0, M_G=1.0, F_gap=1.0, P=2, gamma=0.5, B=4.0)


def with_(c: AAVGConstants, **changes: float) -> AAVGConstants:
    fields = {k: getattr(c, k) for k in ("L", "M", "M_G", "F_gap", "P", "gamma", "B")}
    fields.update(changes)
    return AAVGConstants(**fields)  # type: ignore[arg-type]


# ---- Theorem 1 -----------------------------------------------------------------------------


def test_min_batch_by_hand() -> None:
    # L γ M_G (L γ K + 1/P) = 2*0.1*3*(2*0.1*5 + 1/4) = 0.6*(1 + 0.25) = 0.75
    assert theorem1_min_batch(L=2.0, gamma=0.1, M_G=3.0, P=4, K=5) == pytest.approx(0.75)
    # SIMPLE at K = 2: 1*0.5*1*(0.5*2 + 1/2) = 0.5*1.5 = 0.75
    assert theorem1_min_batch(1.0, 0.5, 1.0, 2, 2) == pytest.approx(0.75)


def test_theorem1_bound_by_hand() -> None:
    # K = 2, N = 3:
    #   2 F_gap/(N(K+1)γ)        = 2/(3*3*0.5)             = 4/9
    #   (LγM/B)(1/P + LKγ/2)     = (0.5/4)*(1/2 + 2*0.5/2) = 0.125*1 = 1/8
    #   (PLγK+1)/(PLγ(K-1)+1)    = (2*0.5*2+1)/(2*0.5*1+1) = 3/2
    #   bound = (4/9 + 1/8)*3/2 = (41/72)*(3/2) = 41/48
    assert theorem1_bound(SIMPLE, K=2, N=3) == pytest.approx(41 / 48)
    # K = 4, N = 3:
    #   2/(3*5*0.5) = 4/15;  0.125*(1/2 + 4*0.5/2) = 0.125*1.5 = 3/16;  (4+1)/(3+1) = 5/4
    #   bound = (4/15 + 3/16)*5/4 = (109/240)*(5/4) = 109/192
    assert theorem1_bound(SIMPLE, K=4, N=3) == pytest.approx(109 / 192)
    # K = 1 (hard sync): factor is 1 + PLγ = 2.
    #   2/(N*2*0.5) = 2/N;  0.125*(1/2 + 1/4) = 3/32
    #   N = 1: (2 + 3/32)*2 = 67/16
    assert theorem1_bound(SIMPLE, K=1, N=1) == pytest.approx(67 / 16)


def test_theorem1_precondition_error_names_numbers() -> None:
    # At K = 2 SIMPLE needs B >= 0.75 (see above); B = 0.5 is below it.
    low = with_(SIMPLE, B=0.5)
    with pytest.raises(ValueError, match=r"Theorem 1 precondition.*B = 0\.5 < 0\.75"):
        theorem1_bound(low, K=2, N=3)
    # Exactly at the precondition it is allowed.
    assert theorem1_bound(with_(SIMPLE, B=0.75), K=2, N=3) > 0
    # The precondition grows with K: B = 1 is enough for K = 2 (0.75) but not for K = 4
    # (0.5*(0.5*4 + 0.5) = 1.25).
    theorem1_bound(with_(SIMPLE, B=1.0), K=2, N=1)
    with pytest.raises(ValueError, match=r"1\.0 < 1\.25"):
        theorem1_bound(with_(SIMPLE, B=1.0), K=4, N=1)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"K": 0, "N": 1}, r"K must be >= 1.*steps per epoch"),
        ({"K": -1, "N": 1}, r"K must be >= 1"),
        ({"K": 2, "N": 0}, r"N must be >= 1"),
        ({"K": 2, "N": math.inf}, r"N must be finite"),
    ],
)
def test_theorem1_rejects_out_of_range(kwargs: dict[str, float], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        theorem1_bound(SIMPLE, **kwargs)


@pytest.mark.parametrize(
    ("field", "value"),
    [("L", 0.0), ("gamma", -0.1), ("B", 0.0), ("P", 0), ("M", -1.0), ("M_G", -1.0),
     ("F_gap", -1.0), ("L", math.nan)],
)  # fmt: skip
def test_constants_reject_out_of_range(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        with_(SIMPLE, **{field: value})


def test_constants_allow_zero_noise_and_gap() -> None:
    # Assumption 4 allows M = 0 (M_G is only required to be >= 0); F_gap = 0 is a start at the
    # optimum. With both zero every term of the bound is zero.
    c = with_(SIMPLE, M=0.0, M_G=0.0, F_gap=0.0)
    assert theorem1_bound(c, K=3, N=2) == 0.0


def test_theorem1_bound_decreases_in_n_to_noise_floor() -> None:
    values = [theorem1_bound(SIMPLE, K=2, N=n) for n in range(1, 200)]
    assert all(b < a for a, b in itertools.pairwise(values))
    # The limit N -> inf is the N-independent term times the factor: (1/8)*(3/2) = 3/16.
    assert values[-1] > 3 / 16
    assert theorem1_bound(SIMPLE, K=2, N=1e12) == pytest.approx(3 / 16)


def test_theorem1_terms_move_as_the_paper_says() -> None:
    # "It favors large B, large P, and small γ" (the noise term), checked on the whole bound
    # with N large enough that the noise term dominates.
    base = theorem1_bound(SIMPLE, K=2, N=1e9)
    assert theorem1_bound(with_(SIMPLE, B=8.0), K=2, N=1e9) < base
    assert theorem1_bound(with_(SIMPLE, gamma=0.25), K=2, N=1e9) < base
    # Larger K with N fixed shrinks the first term 2F_gap/(N(K+1)γ) (with M = 0 it is all).
    quiet = with_(SIMPLE, M=0.0)
    assert theorem1_bound(quiet, K=8, N=1) < theorem1_bound(quiet, K=2, N=1)


# ---- Theorem 2 -----------------------------------------------------------------------------


def test_theorem2_preconditions_by_hand() -> None:
    c = AAVGConstants(L=2.0, M=1.0, M_G=3.0, F_gap=1.0, P=4, gamma=0.1, B=1.0)
    pre = theorem2_preconditions(c, K=5)
    # L K γ / 2 = 2*5*0.1/2 = 0.5 >= 1/P = 0.25
    assert pre.interval_lhs == pytest.approx(0.5)
    assert pre.interval_rhs == pytest.approx(0.25)
    # 3 L² K γ² M_G / 2 = 3*4*5*0.01*3/2 = 0.9 <= B = 1
    assert pre.batch_min == pytest.approx(0.9)
    assert pre.ok and pre.failures() == []
    # K = 1: L γ / 2 = 0.1 < 0.25 fails; batch needs 0.18, fine.
    assert not theorem2_preconditions(c, K=1).interval_ok
    assert theorem2_preconditions(c, K=1).batch_ok
    # K = 6: batch needs 3*4*6*0.01*3/2 = 1.08 > 1.
    pre6 = theorem2_preconditions(c, K=6)
    assert pre6.interval_ok and not pre6.batch_ok
    assert "1.0 < 1.08" in pre6.failures()[0]


def test_theorem2_preconditions_imply_theorem1s() -> None:
    # 1/P <= LKγ/2 gives LγM_G(LγK + 1/P) <= 3L²Kγ²M_G/2, so B at Theorem 2's minimum always
    # meets Theorem 1's. Checked on random constants.
    rng = random.Random(0)
    checked = 0
    for _ in range(2000):
        L, gamma, M_G = rng.uniform(0.01, 10), rng.uniform(0.001, 1), rng.uniform(0, 10)
        P, K = rng.randint(1, 64), rng.randint(1, 64)
        c = AAVGConstants(L=L, M=1.0, M_G=M_G, F_gap=1.0, P=P, gamma=gamma, B=1.0)
        pre = theorem2_preconditions(c, K)
        if not pre.interval_ok:
            continue
        checked += 1
        assert theorem1_min_batch(L, gamma, M_G, P, K) <= pre.batch_min * (1 + 1e-12)
    assert checked > 100


def test_regime() -> None:
    assert theorem2_regime(L=1.0, gamma=0.5, P=2) is Theorem2Regime.K_OPT_IS_ONE  # a = 1
    assert theorem2_regime(L=1.0, gamma=0.25, P=2) is Theorem2Regime.K_OPT_IS_ONE  # a = 0.5
    assert theorem2_regime(L=1.0, gamma=0.5, P=4) is Theorem2Regime.K_OPT_ABOVE_ONE  # a = 2
    with pytest.raises(ValueError, match="P"):
        theorem2_regime(L=1.0, gamma=0.5, P=0)


def test_equation1_by_hand() -> None:
    # SIMPLE, K = 2, S = 6 (N = 3):
    #   2 F_gap K/(Sγ(K+1)) = 4/(6*0.5*3) = 4/9;  L²γ²MK/B = 0.25*2/4 = 1/8;  factor 3/2
    #   -> 41/48, equal to Theorem 1 at (K=2, N=3) because LKγ/2 = 0.5 = 1/P exactly.
    assert bound_fixed_samples(SIMPLE, K=2, S=6) == pytest.approx(41 / 48)
    assert bound_fixed_samples(SIMPLE, K=2, S=6) == pytest.approx(theorem1_bound(SIMPLE, 2, 3))
    # K = 4, S = 12 (N = 3): 8/(12*0.5*5) = 4/15;  0.25*4/4 = 1/4;  factor 5/4
    #   -> (4/15 + 1/4)*5/4 = (31/60)*(5/4) = 31/48, above Theorem 1's 109/192.
    assert bound_fixed_samples(SIMPLE, K=4, S=12) == pytest.approx(31 / 48)
    assert theorem1_bound(SIMPLE, 4, 3) < 31 / 48


def test_equation1_upper_bounds_theorem1_under_preconditions() -> None:
    rng = random.Random(1)
    checked = 0
    for _ in range(2000):
        c = AAVGConstants(
            L=rng.uniform(0.1, 5), M=rng.uniform(0, 5), M_G=rng.uniform(0, 5),
            F_gap=rng.uniform(0, 10), P=rng.randint(1, 32), gamma=rng.uniform(0.01, 1),
            B=rng.uniform(1, 500),
        )  # fmt: skip
        K, N = rng.randint(1, 32), rng.randint(1, 50)
        if not theorem2_preconditions(c, K).ok:
            continue
        checked += 1
        assert theorem1_bound(c, K, N) <= bound_fixed_samples(c, K, N * K) * (1 + 1e-12)
    assert checked > 100


def test_equation1_checks_preconditions() -> None:
    # SIMPLE at K = 1: L K γ / 2 = 0.25 < 1/P = 0.5.
    with pytest.raises(ValueError, match=r"Theorem 2 precondition at K = 1.*0\.25 < 0\.5"):
        bound_fixed_samples(SIMPLE, K=1, S=10)
    # Unchecked it is the proof's B(K): (2*1/(10*0.5*2) + 0.25*1/4)*(1+1)/1 = (0.2+1/16)*2
    assert bound_fixed_samples(SIMPLE, K=1, S=10, check_preconditions=False) == pytest.approx(0.525)
    with pytest.raises(ValueError, match=r"S = N\*K must be >= K"):
        bound_fixed_samples(SIMPLE, K=4, S=2)


def test_equation1_is_f_plus_g() -> None:
    # Eq. (2): the bound (1) = f(K) + g(K) with α = 2F_gap/(Sγ), β = L²γ²M/B, a = PLγ.
    c = AAVGConstants(L=0.7, M=2.0, M_G=1.0, F_gap=3.0, P=8, gamma=0.3, B=16.0)
    S = 600.0
    alpha, beta, a = theorem2_coefficients(c, S)
    assert (alpha, beta, a) == pytest.approx((6 / 180, 0.49 * 0.09 * 2 / 16, 8 * 0.7 * 0.3))
    for K in (1, 2, 3, 7, 20, 64):
        split = theorem2_f(alpha, a, K) + theorem2_g(beta, a, K)
        assert bound_fixed_samples(c, K, S, check_preconditions=False) == pytest.approx(split)


def _numeric_derivative(fn: Callable[[float], float], x: float) -> float:
    # Central difference with a step relative to x, so that rounding stays small at large K.
    h = 1e-5 * x
    return (fn(x + h) - fn(x - h)) / (2 * h)


@pytest.mark.parametrize("a", [0.1, 0.5, 0.9, 1.0, 1.1, 2.0, 5.0])
def test_f_prime_formula_and_sign(a: float) -> None:
    # The proof: f'(K) = α(2aK+1)(1-a)/((K+1)²(a(K-1)+1)²): f increases in K when a < 1 and
    # decreases when a > 1 (constant at a = 1). Checked by finite differences, not the formula.
    alpha = 1.7
    for K in (1.0, 1.5, 2.0, 4.0, 10.0, 100.0):
        num = _numeric_derivative(lambda k: theorem2_f(alpha, a, k), K)
        assert num == pytest.approx(theorem2_f_prime(alpha, a, K), rel=1e-5, abs=1e-10)
        if a < 1:
            assert num > 0
        elif a > 1:
            assert num < 0
        else:
            assert abs(num) < 1e-8
    ks = [1 + 0.25 * i for i in range(200)]
    values = [theorem2_f(alpha, a, k) for k in ks]
    pairs = list(itertools.pairwise(values))
    if a < 1:
        assert all(y > x for x, y in pairs)
    elif a > 1:
        assert all(y < x for x, y in pairs)


@pytest.mark.parametrize("a", [0.3, 1.0, 1.2, 1.6, 2.0, 4.0, 50.0])
def test_g_prime_formula(a: float) -> None:
    beta = 0.8
    for K in (1.0, 1.3, 2.0, 5.0, 30.0):
        num = _numeric_derivative(lambda k: theorem2_g(beta, a, k), K)
        assert num == pytest.approx(theorem2_g_prime(beta, a, K), rel=1e-5, abs=1e-10)
    if a <= 1:  # increasing on K >= 1
        values = [theorem2_g(beta, a, 1 + 0.1 * i) for i in range(300)]
        assert all(y > x for x, y in itertools.pairwise(values))


@pytest.mark.parametrize("a", [1.05, 1.3, 1.618, 2.0, 3.0, 10.0, 1000.0])
def test_g_minimiser_against_grid(a: float) -> None:
    beta = 2.5
    k_hat = g_minimiser(a)
    # The paper: K̂_opt ∈ (0, 2); it lies right of the pole (a-1)/a, where g is defined.
    assert 0 < k_hat < 2
    pole = (a - 1) / a
    assert k_hat > pole
    step = 1e-4
    grid = [pole + step * i for i in range(1, int((10 - pole) / step))]
    k_grid = min(grid, key=lambda k: theorem2_g(beta, a, k))
    assert k_grid == pytest.approx(k_hat, abs=2 * step)
    assert theorem2_g_prime(beta, a, k_hat) == pytest.approx(0.0, abs=1e-9)


def test_g_minimiser_values() -> None:
    # a = 2: (1 + sqrt(2))/2;  a = 4: (3 + sqrt(12))/4
    assert g_minimiser(2.0) == pytest.approx((1 + math.sqrt(2)) / 2)
    assert g_minimiser(4.0) == pytest.approx((3 + math.sqrt(12)) / 4)
    # >= 1 exactly when a >= golden ratio (a(a-1) >= 1).
    phi = (1 + math.sqrt(5)) / 2
    assert g_minimiser(phi) == pytest.approx(1.0)
    assert g_minimiser(1.5) < 1 < g_minimiser(1.7)
    for bad in (1.0, 0.5):
        with pytest.raises(ValueError, match="a = P\\*L\\*gamma > 1"):
            g_minimiser(bad)


# ---- Choosing K ----------------------------------------------------------------------------

# a = PLγ = 16 * 1 * (1/32) = 0.5 <= 1; B large enough for Theorem 2's batch condition at every
# candidate: 3 L² K γ² M_G / 2 at K = 64 is 3*64*(1/1024)*2/2 = 0.1875.
LOW_A = AAVGConstants(L=1.0, M=4.0, M_G=2.0, F_gap=50.0, P=16, gamma=1 / 32, B=32.0)
CANDIDATES = [1, 2, 3, 4, 8, 16, 32, 64]


def test_best_k_is_one_when_plgamma_at_most_one() -> None:
    assert LOW_A.a == pytest.approx(0.5)
    assert theorem2_regime(LOW_A.L, LOW_A.gamma, LOW_A.P) is Theorem2Regime.K_OPT_IS_ONE
    assert all(theorem2_preconditions(LOW_A, k).batch_ok for k in CANDIDATES)
    S = 4096
    assert best_k(LOW_A, S, CANDIDATES) == 1
    # Order does not matter, and B(K) is increasing over the candidates.
    assert best_k(LOW_A, S, reversed(CANDIDATES)) == 1
    values = [bound_fixed_samples(LOW_A, k, S, check_preconditions=False) for k in CANDIDATES]
    assert all(y > x for x, y in itertools.pairwise(values))
    # The same for a = 1 exactly (f constant, g increasing).
    assert best_k(with_(LOW_A, gamma=1 / 16), S, CANDIDATES) == 1


def test_interval_precondition_excludes_k1_when_plgamma_at_most_one() -> None:
    # LKγ/2 >= 1/P needs K >= 2/(PLγ) = 4 here, so K = 1 is outside Theorem 2's own
    # preconditions (the proof: "K_opt = 2/(LPγ) >= 2"); among admissible K the smallest wins.
    assert not theorem2_preconditions(LOW_A, 1).interval_ok
    assert not theorem2_preconditions(LOW_A, 3).interval_ok
    assert theorem2_preconditions(LOW_A, 4).ok
    assert best_k(LOW_A, 4096, CANDIDATES, admissible_only=True) == 4
    with pytest.raises(ValueError, match="no candidate K meets"):
        best_k(LOW_A, 4096, [1, 2, 3], admissible_only=True)


def test_best_k_above_one_when_optimisation_term_dominates() -> None:
    # a = 8 * 1 * 0.5 = 4 > 1; a large gap over few steps makes f (decreasing in K) dominate.
    c = AAVGConstants(L=1.0, M=0.01, M_G=1.0, F_gap=1000.0, P=8, gamma=0.5, B=64.0)
    assert theorem2_regime(c.L, c.gamma, c.P) is Theorem2Regime.K_OPT_ABOVE_ONE
    k = best_k(c, 256, CANDIDATES, admissible_only=True)
    assert k > 1
    # It is the actual minimiser over the candidates.
    values = {kk: bound_fixed_samples(c, kk, 256) for kk in CANDIDATES}
    assert values[k] == min(values.values())


def test_best_k_can_be_one_when_plgamma_above_one() -> None:
    # a = 2, F_gap = 0 (α = 0): the bound is g alone, g(1) = 3β < g(2) = 10β/3, so over integer
    # K the best is 1 although a > 1 (the real minimiser g_minimiser(2) ≈ 1.207 is above 1).
    # K = 1 meets both preconditions here: Lγ/2 = 0.25 >= 1/P = 0.25.
    c = AAVGConstants(L=1.0, M=1.0, M_G=1.0, F_gap=0.0, P=4, gamma=0.5, B=8.0)
    assert c.a == pytest.approx(2.0)
    assert theorem2_preconditions(c, 1).ok
    assert best_k(c, 64, CANDIDATES, admissible_only=True) == 1
    beta = theorem2_coefficients(c, 64).beta
    assert bound_fixed_samples(c, 1, 64) == pytest.approx(3 * beta)
    assert bound_fixed_samples(c, 2, 64) == pytest.approx(10 * beta / 3)


def test_best_k_rejects_empty_and_ties_go_to_larger_k() -> None:
    with pytest.raises(ValueError, match="at least one candidate"):
        best_k(SIMPLE, 10, [])
    # F_gap = 0 and M = 0: the bound is exactly 0 at every K; the largest K is returned.
    c = with_(SIMPLE, M=0.0, F_gap=0.0)
    assert best_k(c, 64, [2, 8, 1, 4]) == 8
    # Without the tie the smallest bound wins (a = 1 here, so K = 1; see above).
    assert best_k(SIMPLE, 64, [2, 8, 1, 4]) == 1
