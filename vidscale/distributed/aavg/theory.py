"""The convergence bounds of AAVG (Cong et al., §III-A, Theorems 1 and 2) as plain functions.

AAVG runs P learners that each take K local SGD steps with step size γ and per-learner batch B,
then averages their models (Alg. 1, line 12); N is the number of such averaging rounds, so a
learner takes S = N·K local steps in all. With fixed γ and B the paper bounds the average
expected squared gradient norm of the averaged models, E (1/N) Σ_n ||∇F(w̃_n)||², by

    Theorem 1:  [2(F(w̃_1) - F*) / (N(K+1)γ) + (LγM/B)(1/P + LKγ/2)]
                · (PLγK + 1) / (PLγ(K-1) + 1),
    provided    B ≥ Lγ M_G (LγK + 1/P).

Theorem 2 keeps S = N·K fixed, assumes LKγ/2 ≥ 1/P and B ≥ 3L²Kγ²M_G/2, and bounds the same
quantity by its equation (1):

    [2(F(w̃_1) - F*)K / (Sγ(K+1)) + L²γ²MK/B] · (PLγK + 1) / (PLγ(K-1) + 1);

it then states that the best K is 1 when PLγ ≤ 1 and can exceed 1 when PLγ > 1.

Contracts shared by every function here: arguments out of range (K < 1, N < 1, P < 1, L ≤ 0,
γ ≤ 0, B ≤ 0, a negative M, M_G or F(w̃_1) - F*, a value that is not finite) raise
`ValueError` naming the argument and its value; so does a violated precondition of a theorem
when a function states that it checks it. K is the averaging interval in local steps: the
training option "K = -1" (average once per epoch) must be translated to the number of steps a
learner takes per epoch before it is used here. The proof of Theorem 2 treats K as a real
number; the functions accept real K ≥ 1 for that reason, though Alg. 1 only runs integer K.

These are statements about constants (L, M, M_G) that are not known for a real network, so the
functions serve to reason about the choice of K, P, B and γ, not to predict a training run.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "AAVGConstants",
    "Theorem2Coefficients",
    "Theorem2Preconditions",
    "Theorem2Regime",
    "best_k",
    "bound_fixed_samples",
    "g_minimiser",
    "theorem1_bound",
    "theorem1_min_batch",
    "theorem2_coefficients",
    "theorem2_f",
    "theorem2_f_prime",
    "theorem2_g",
    "theorem2_g_prime",
    "theorem2_preconditions",
    "theorem2_regime",
]


def _finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


def _positive(name: str, value: float) -> None:
    _finite(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def _non_negative(name: str, value: float) -> None:
    _finite(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def _at_least_one(name: str, value: float, hint: str = "") -> None:
    _finite(name, value)
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}{hint}")


# Said when K < 1 is passed, because -1 is a legal value of the training option.
_K_HINT = " (K = -1, once per epoch, must be given as the number of steps per epoch)"


@dataclass(frozen=True)
class AAVGConstants:
    """The constants of Theorems 1 and 2 (Cong et al., §III-A, Assumptions 1-4).

    `L`: Lipschitz constant of ∇F (Assumption 1), > 0.
    `M`: the additive constant of the gradient-noise bound (Assumption 4), ≥ 0; it appears in
    the bounds themselves.
    `M_G`: the constant the paper's preconditions on B use (Theorem 1 and Theorem 2), ≥ 0. The
    paper names the constant M_G in the preconditions and M in the bounds, and its Assumption 4
    only introduces M and M_V; M_G is not defined in the text. In the framework it cites
    (Bottou, Curtis and Nocedal, ref. [2]) M_G = M_V + μ_G² bounds the second moment of the
    stochastic gradient, which with unbiased gradients (Assumption 3) is M_V + 1. Rather than
    guess the relation, both are taken as given, separately.
    `F_gap`: F(w̃_1) - F*, the initial optimality gap (Assumption 2 makes it ≥ 0).
    `P`: number of learners, ≥ 1.
    `gamma`: the fixed step size γ̄, > 0.
    `B`: the fixed per-learner batch size B̄, > 0 (a real number: the theorems do not need an
    integer).

    Construction validates the ranges and raises `ValueError` when one is violated.
    """

    L: float
    M: float
    M_G: float
    F_gap: float
    P: int
    gamma: float
    B: float

    def __post_init__(self) -> None:
        _positive("L", self.L)
        _non_negative("M", self.M)
        _non_negative("M_G", self.M_G)
        _non_negative("F_gap", self.F_gap)
        _at_least_one("P", self.P)
        _positive("gamma", self.gamma)
        _positive("B", self.B)

    @property
    def a(self) -> float:
        """a = PLγ, the quantity that decides the regime of Theorem 2 (its proof names it a)."""
        return self.P * self.L * self.gamma


def theorem1_min_batch(L: float, gamma: float, M_G: float, P: int, K: float) -> float:
    """The smallest B̄ allowed by Theorem 1 (§III-A): B̄ ≥ Lγ M_G (LγK + 1/P).

    It grows linearly with K: the longer the learners run apart, the larger the batch the
    bound needs. More learners (larger P) lower it.
    """
    _positive("L", L)
    _positive("gamma", gamma)
    _non_negative("M_G", M_G)
    _at_least_one("P", P)
    _at_least_one("K", K, _K_HINT)
    return L * gamma * M_G * (L * gamma * K + 1 / P)


def _sync_factor(a: float, K: float) -> float:
    # (PLγK + 1)/(PLγ(K-1) + 1), the factor that multiplies both bounds; it is 1 + PLγ at K = 1
    # and falls towards 1 as K grows, because the spread of the learners relative to each
    # other's progress matters less when they average less often.
    return (a * K + 1) / (a * (K - 1) + 1)


def theorem1_bound(c: AAVGConstants, K: float, N: float) -> float:
    """Theorem 1 (§III-A): the bound on E (1/N) Σ_{n=1..N} ||∇F(w̃_n)||² after N averagings.

    Returns [2 F_gap / (N(K+1)γ) + (LγM/B)(1/P + LKγ/2)] · (PLγK + 1)/(PLγ(K-1) + 1).

    Requires K ≥ 1 (local steps between averagings) and N ≥ 1 (averaging rounds); raises
    `ValueError` when B is below the theorem's precondition B ≥ Lγ M_G (LγK + 1/P)
    (`theorem1_min_batch`), with the numbers in the message.
    """
    _at_least_one("K", K, _K_HINT)
    _at_least_one("N", N)
    need = theorem1_min_batch(c.L, c.gamma, c.M_G, c.P, K)
    if need > c.B:
        raise ValueError(
            "Theorem 1 precondition B >= L*gamma*M_G*(L*gamma*K + 1/P) fails: "
            f"B = {c.B!r} < {need!r} = {c.L!r}*{c.gamma!r}*{c.M_G!r}*"
            f"({c.L!r}*{c.gamma!r}*{K!r} + 1/{c.P!r})"
        )
    # The first term shrinks with N (more rounds) and with K and γ (more progress per round);
    # the second does not depend on N: it is the noise floor that fixed γ and B leave.
    optimisation = 2 * c.F_gap / (N * (K + 1) * c.gamma)
    noise = (c.L * c.gamma * c.M / c.B) * (1 / c.P + c.L * K * c.gamma / 2)
    return (optimisation + noise) * _sync_factor(c.a, K)


@dataclass(frozen=True)
class Theorem2Preconditions:
    """The two preconditions of Theorem 2 (§III-A) at one K, with the numbers compared.

    `interval_lhs` = LKγ/2 and `interval_rhs` = 1/P: the first precondition is LKγ/2 ≥ 1/P.
    `batch` = B and `batch_min` = 3L²Kγ²M_G/2: the second is B ≥ 3L²Kγ²M_G/2.
    Comparisons are exact floating-point ones.
    """

    interval_lhs: float
    interval_rhs: float
    batch: float
    batch_min: float

    @property
    def interval_ok(self) -> bool:
        return self.interval_lhs >= self.interval_rhs

    @property
    def batch_ok(self) -> bool:
        return self.batch >= self.batch_min

    @property
    def ok(self) -> bool:
        return self.interval_ok and self.batch_ok

    def failures(self) -> list[str]:
        """One message per failing precondition, with its numbers; empty when both hold."""
        out = []
        if not self.interval_ok:
            out.append(f"L*K*gamma/2 >= 1/P fails: {self.interval_lhs!r} < {self.interval_rhs!r}")
        if not self.batch_ok:
            out.append(f"B >= 3*L^2*K*gamma^2*M_G/2 fails: B = {self.batch!r} < {self.batch_min!r}")
        return out


def theorem2_preconditions(c: AAVGConstants, K: float) -> Theorem2Preconditions:
    """Evaluate Theorem 2's preconditions LKγ/2 ≥ 1/P and B ≥ 3L²Kγ²M_G/2 at K (§III-A).

    Together they imply Theorem 1's precondition: with 1/P ≤ LKγ/2,
    Lγ M_G (LγK + 1/P) ≤ Lγ M_G (LγK + LγK/2) = 3L²Kγ²M_G/2 ≤ B. The first one needs
    K ≥ 2/(PLγ), so it can never hold at K = 1 when PLγ < 2, in particular not in the
    PLγ ≤ 1 regime where the theorem names K = 1 as optimal (see `best_k`).
    """
    _at_least_one("K", K, _K_HINT)
    return Theorem2Preconditions(
        interval_lhs=c.L * K * c.gamma / 2,
        interval_rhs=1 / c.P,
        batch=c.B,
        batch_min=3 * c.L**2 * K * c.gamma**2 * c.M_G / 2,
    )


class Theorem2Regime(enum.Enum):
    """Which case of Theorem 2 (§III-A) applies; decided by a = PLγ alone."""

    #: PLγ ≤ 1: the bound (1) increases with K, so K_opt = 1.
    K_OPT_IS_ONE = "K_opt = 1"
    #: PLγ > 1: the bound (1) may first decrease in K, so K_opt can exceed 1. The theorem
    #: states K_opt > 1; its proof concludes K_opt ≥ 1, and over integer K the minimiser can
    #: still be 1 (see `best_k`).
    K_OPT_ABOVE_ONE = "K_opt > 1"


def theorem2_regime(L: float, gamma: float, P: int) -> Theorem2Regime:
    """The case of Theorem 2 (§III-A): K_opt = 1 when PLγ ≤ 1, K_opt > 1 when PLγ > 1.

    Both parts of the bound (1) are non-decreasing in K when PLγ ≤ 1 (proof, eq. (2)), so no
    K > 1 can improve it; with PLγ > 1 its first part decreases in K.
    """
    _positive("L", L)
    _positive("gamma", gamma)
    _at_least_one("P", P)
    if P * L * gamma <= 1:
        return Theorem2Regime.K_OPT_IS_ONE
    return Theorem2Regime.K_OPT_ABOVE_ONE


class Theorem2Coefficients(NamedTuple):
    """α = 2 F_gap/(Sγ), β = L²γ²M/B and a = PLγ, as defined in the proof of Theorem 2."""

    alpha: float
    beta: float
    a: float


def theorem2_coefficients(c: AAVGConstants, S: float) -> Theorem2Coefficients:
    """α, β and a of the proof of Theorem 2 (§III-A) for S = N·K local steps per learner."""
    _positive("S", S)
    return Theorem2Coefficients(
        alpha=2 * c.F_gap / (S * c.gamma),
        beta=c.L**2 * c.gamma**2 * c.M / c.B,
        a=c.a,
    )


def _check_f_g_domain(a: float, K: float) -> None:
    _non_negative("a", a)
    _positive("K", K)
    # Below K = (a-1)/a the denominator a(K-1)+1 is ≤ 0: f and g have a pole there and the
    # proof's analysis (which lives on K ≥ 1) says nothing.
    if a * (K - 1) + 1 <= 0:
        raise ValueError(f"need a*(K-1)+1 > 0, got a = {a!r}, K = {K!r}")


def theorem2_f(alpha: float, a: float, K: float) -> float:
    """f(K) = αK/(K+1) · (aK+1)/(a(K-1)+1), the optimisation part of the bound (1) (eq. (2)).

    Increasing in K when a < 1, constant when a = 1, decreasing when a > 1: see
    `theorem2_f_prime`.
    """
    _non_negative("alpha", alpha)
    _check_f_g_domain(a, K)
    return alpha * K / (K + 1) * _sync_factor(a, K)


def theorem2_f_prime(alpha: float, a: float, K: float) -> float:
    """f'(K) = α(2aK+1)(1-a) / ((K+1)²(a(K-1)+1)²), as stated in the proof of Theorem 2.

    Its sign is the sign of 1 - a for K > 0.
    """
    _non_negative("alpha", alpha)
    _check_f_g_domain(a, K)
    return alpha * (2 * a * K + 1) * (1 - a) / ((K + 1) ** 2 * (a * (K - 1) + 1) ** 2)


def theorem2_g(beta: float, a: float, K: float) -> float:
    """g(K) = βK · (aK+1)/(a(K-1)+1), the noise part of the bound (1) (eq. (2)).

    Increasing in K when a ≤ 1; when a > 1 it decreases up to `g_minimiser(a)` and then grows
    almost linearly.
    """
    _non_negative("beta", beta)
    _check_f_g_domain(a, K)
    return beta * K * _sync_factor(a, K)


def theorem2_g_prime(beta: float, a: float, K: float) -> float:
    """g'(K) = β(a²K² + 2a(1-a)K + 1 - a) / (a(K-1)+1)², as stated in the proof of Theorem 2."""
    _non_negative("beta", beta)
    _check_f_g_domain(a, K)
    return beta * (a * a * K * K + 2 * a * (1 - a) * K + 1 - a) / (a * (K - 1) + 1) ** 2


def g_minimiser(a: float) -> float:
    """K̂_opt = (a - 1 + sqrt(a(a-1)))/a, where g(K) of Theorem 2's proof is smallest, a > 1.

    It is the larger root of the numerator of g'(K); the smaller root lies left of the pole
    K = (a-1)/a. The paper notes K̂_opt ∈ (0, 2). It is ≥ 1 only when a ≥ (1+√5)/2 (then
    a(a-1) ≥ 1), so for 1 < a < (1+√5)/2 g is already increasing on K ≥ 1. Raises
    `ValueError` for a ≤ 1, where g has no interior minimum.
    """
    _finite("a", a)
    if a <= 1:
        raise ValueError(f"g_minimiser needs a = P*L*gamma > 1, got {a!r}")
    return (a - 1 + math.sqrt(a * (a - 1))) / a


def bound_fixed_samples(
    c: AAVGConstants, K: float, S: float, *, check_preconditions: bool = True
) -> float:
    """Equation (1) of Theorem 2 (§III-A): the bound with N = S/K averaging rounds.

    Returns [2 F_gap K / (Sγ(K+1)) + L²γ²MK/B] · (PLγK+1)/(PLγ(K-1)+1), which is
    `theorem2_f(α, a, K) + theorem2_g(β, a, K)` with `theorem2_coefficients(c, S)`.

    S = N·K is the number of local steps per learner, so the P learners process S·P·B samples
    whatever K is; S ≥ K is required (at least one averaging round). Equation (1) replaces
    Theorem 1's 1/P + LKγ/2 by LKγ, which is an upper bound only when LKγ/2 ≥ 1/P; so by
    default both preconditions of Theorem 2 are checked (they also imply Theorem 1's) and
    `ValueError` names the failing ones. With `check_preconditions=False` the function is just
    the proof's B(K), evaluated where it need not bound anything.
    """
    _at_least_one("K", K, _K_HINT)
    _positive("S", S)
    if S < K:
        raise ValueError(f"S = N*K must be >= K (N >= 1), got S = {S!r}, K = {K!r}")
    if check_preconditions:
        failures = theorem2_preconditions(c, K).failures()
        if failures:
            raise ValueError(f"Theorem 2 precondition at K = {K!r}: " + "; ".join(failures))
    optimisation = 2 * c.F_gap * K / (S * c.gamma * (K + 1))
    noise = c.L**2 * c.gamma**2 * c.M * K / c.B
    return (optimisation + noise) * _sync_factor(c.a, K)


def best_k(
    c: AAVGConstants, S: float, candidates: Iterable[int], *, admissible_only: bool = False
) -> int:
    """The candidate K with the smallest equation (1) of Theorem 2 (§III-A) at fixed S.

    With the default `admissible_only=False` every candidate is scored by the proof's B(K)
    (equation (1) without the precondition check), which is how the proof argues that K = 1
    is optimal when PLγ ≤ 1: B(K) is then non-decreasing. That argument cannot be carried
    out inside the theorem's own preconditions: LKγ/2 ≥ 1/P needs K ≥ 2/(PLγ) ≥ 2 in that
    regime (the proof itself writes "K_opt = 2/(LPγ) ≥ 2" before concluding K = 1). With
    `admissible_only=True` only candidates meeting both preconditions
    (`theorem2_preconditions`) are scored, and then the smallest admissible K wins in that
    regime.

    When PLγ > 1 the winner depends on α, β and a; over integer K it can be 1 even then (for
    example a = 2 and α ≈ 0: g(1) = 3β < g(2) = 10β/3), although the real-valued minimiser
    is above 1. Ties go to the larger K, which averages less often for the same guarantee.
    Raises `ValueError` when no candidate is given or none is admissible; every candidate
    must satisfy 1 ≤ K ≤ S.
    """
    ks = list(candidates)
    if not ks:
        raise ValueError("best_k needs at least one candidate K")
    scored: list[tuple[float, int]] = []
    rejected: list[str] = []
    for k in ks:
        if admissible_only:
            failures = theorem2_preconditions(c, k).failures()
            if failures:
                rejected.append(f"K = {k}: " + "; ".join(failures))
                continue
        scored.append((bound_fixed_samples(c, k, S, check_preconditions=False), k))
    if not scored:
        raise ValueError("no candidate K meets Theorem 2's preconditions: " + " | ".join(rejected))
    # min over (value, -K): the smallest bound, and among equal bounds the largest K.
    return min(scored, key=lambda vk: (vk[0], -vk[1]))[1]
