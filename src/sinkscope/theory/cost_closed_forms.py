"""Closed forms and bounds for the cost of sink vs diagonal attention patterns (SPEC §6, §7).

A pattern's cost is the smallest norm of a `W_QK` whose logits put every query's target at least `κ`
above each competitor (`sinkscope.theory.cost` solves it as a convex program). These formulas give the
cost without a solver where the geometry allows one, and the quantities that relate it to attention:

- orthonormal embeddings `z_0..z_T` (causal): sink nuclear `κT/√(T+1)`, diagonal nuclear
  `κ Σ_{i=1..T} √(i/(i+1))`, Frobenius for both `κ √(T + 1 - H_{T+1})`;
- any geometry, non-causal sink: `κ / (γ1 γ2)` (SPEC §4; for the causal sink it is an upper bound,
  since the causal constraints are a subset of the non-causal ones);
- the generalized bigram-backcopy vocabulary (SPEC §7);
- margin ↔ attention mass and Wendel's probability that the contexts lie in a half-space.

Every formula here is checked against the solver in `tests/unit/test_cost_closed_forms.py`.
"""

from __future__ import annotations

import math

from sinkscope.errors import SinkscopeError

PATTERNS = ("sink", "diagonal")
COST_NORMS = ("nuclear", "frobenius")


def _check_positive_int(name: str, value: int) -> None:
    if int(value) != value or value < 1:
        raise SinkscopeError(f"{name} must be a positive integer, got {value!r}")


def _check_kappa(kappa: float) -> None:
    if not kappa > 0:
        raise SinkscopeError(f"kappa (the logit margin) must be > 0, got {kappa!r}")


def harmonic_number(n: int) -> float:
    """`H_n = Σ_{k=1..n} 1/k` (`H_0 = 0`)."""
    return math.fsum(1.0 / k for k in range(1, n + 1))


def orthonormal_sink_nuclear(T: int, kappa: float = 1.0) -> float:
    """Causal sink cost in nuclear norm for orthonormal `z_0..z_T`: `κT/√(T+1)`, at rank 1 (SPEC §6)."""
    _check_positive_int("T", T)
    _check_kappa(kappa)
    return kappa * T / math.sqrt(T + 1)


def orthonormal_diagonal_nuclear(T: int, kappa: float = 1.0) -> float:
    """Causal diagonal cost in nuclear norm for orthonormal `z_0..z_T`: `κ Σ_{i=1..T} √(i/(i+1))`.

    Full rank; grows like `κ(T - ½ ln T)`, i.e. linearly in T where the sink grows like `√T` (SPEC §6).
    """
    _check_positive_int("T", T)
    _check_kappa(kappa)
    return kappa * math.fsum(math.sqrt(i / (i + 1)) for i in range(1, T + 1))


def orthonormal_frobenius(T: int, kappa: float = 1.0) -> float:
    """Causal sink and diagonal cost in Frobenius norm for orthonormal `z_0..z_T`: `κ √(T + 1 - H_{T+1})`.

    The two patterns cost the same in Frobenius norm: the sink's advantage is a rank (nuclear) advantage.
    """
    _check_positive_int("T", T)
    _check_kappa(kappa)
    return kappa * math.sqrt(T + 1 - harmonic_number(T + 1))


def orthonormal_cost(T: int, pattern: str, norm: str, kappa: float = 1.0) -> float:
    """The causal orthonormal closed form of `pattern` (sink, diagonal) in `norm` (nuclear, frobenius)."""
    if pattern not in PATTERNS:
        raise SinkscopeError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if norm not in COST_NORMS:
        raise SinkscopeError(f"norm must be one of {COST_NORMS}, got {norm!r}")
    if norm == "frobenius":
        return orthonormal_frobenius(T, kappa)
    if pattern == "sink":
        return orthonormal_sink_nuclear(T, kappa)
    return orthonormal_diagonal_nuclear(T, kappa)


def noncausal_sink_cost(gamma1: float, gamma2: float, kappa: float = 1.0) -> float:
    """Non-causal sink cost `κ / (γ1 γ2)`, any geometry, in nuclear, Frobenius or operator norm (SPEC §4, §6).

    `γ1 = dist(0, conv{z_1..z_T})`, `γ2 = dist(z_0, conv{z_1..z_T})` (same units as z; the cost is in
    units of 1/|z|²). Attained by the rank-1 `W = κ p qᵀ / (|p| |q| γ1 γ2)` with p, q the minimisers.
    Also an upper bound on the causal sink cost. Infinite when H1 or H2 fails (γ1 = 0 or γ2 = 0).
    """
    _check_kappa(kappa)
    if gamma1 < 0 or gamma2 < 0:
        raise SinkscopeError(f"gamma1 and gamma2 are distances and must be >= 0, got {gamma1!r}, {gamma2!r}")
    if gamma1 == 0 or gamma2 == 0:
        return math.inf
    return kappa / (gamma1 * gamma2)


def kappa_for_mass(T: int, delta: float) -> float:
    """Margin `κ = log(T(1-δ)/δ)` that guarantees attention mass ≥ 1-δ on the target (SPEC §6).

    With T competitors each at least κ below the target logit, the target's softmax mass is at least
    `1 / (1 + T e^{-κ})`, with equality when every competitor sits exactly κ below: so κ is the smallest
    margin that guarantees ≥ 1-δ in the worst case. For the causal sink and diagonal, the last query
    (i = T) has T competitors. May be ≤ 0 when δ ≥ T/(T+1) (uniform attention already achieves it).
    """
    _check_positive_int("T", T)
    if not 0 < delta < 1:
        raise SinkscopeError(f"delta (attention mass off the target) must be in (0, 1), got {delta!r}")
    return math.log(T * (1 - delta) / delta)


def mass_for_kappa(T: int, kappa: float) -> float:
    """Worst-case target mass `1 / (1 + T e^{-κ})`, T competitors at margin κ (inverts `kappa_for_mass`)."""
    _check_positive_int("T", T)
    return 1.0 / (1.0 + T * math.exp(-kappa))


def wendel_probability(T: int, d: int) -> float:
    """Wendel's probability that T iid symmetric points in R^d lie in an open half-space: P(H1) of SPEC §6.

    `2^{-(T-1)} Σ_{k=0..d-1} C(T-1, k)`; equals 1 when T ≤ d. When it is small (zero-mean embeddings of
    rank d ≲ T/2) a sink cannot be represented at all: `0 ∈ conv{z_1..z_T}`.
    """
    _check_positive_int("T", T)
    _check_positive_int("d", d)
    return math.fsum(math.comb(T - 1, k) for k in range(min(d, T))) / 2 ** (T - 1)


def predicted_winner(T: int, rank: int) -> str:
    """Figure 3's predicted cheaper pattern for T contexts of rank r: "diagonal" where Wendel's P(H1) < ½ (the
    sink is usually infeasible: low rank, long context), "sink" where r ≥ T + 1 (orthonormal-like: the closed
    forms `κT/√(T+1)` < `κ Σ √(i/(i+1))`), else "undecided"."""
    if wendel_probability(T, rank) < 0.5:
        return "diagonal"
    return "sink" if rank >= T + 1 else "undecided"


def _gbb_queries(V: int, K: int) -> int:
    _check_positive_int("V", V)
    if int(K) != K or not 0 <= K < V:
        raise SinkscopeError(f"K (number of triggers) must be an integer in [0, V), got {K!r} with V={V}")
    return V - K


def gbb_sink_cost(V: int, K: int, kappa: float = 1.0) -> float:
    """gBB vocabulary-level sink cost `κ √(N V / (V+1))`, N = V - K, nuclear = Frobenius (SPEC §7).

    Non-causal, orthonormal embeddings of the V tokens and BOS: every non-trigger query i puts its
    logit on BOS κ above every token j (including itself): `z_i W (z_BOS - z_j)ᵀ ≥ κ`.
    """
    _check_kappa(kappa)
    n = _gbb_queries(V, K)
    return kappa * math.sqrt(n * V / (V + 1))


def gbb_diagonal_nuclear(V: int, K: int, kappa: float = 1.0) -> float:
    """gBB vocabulary-level diagonal cost in nuclear norm `κ (N - 1 + √(1 - N/(V+1)))` (SPEC §7).

    Every non-trigger query i puts its logit on itself κ above every other token and BOS.
    """
    _check_kappa(kappa)
    n = _gbb_queries(V, K)
    return kappa * (n - 1 + math.sqrt(1 - n / (V + 1)))


def gbb_diagonal_frobenius(V: int, K: int, kappa: float = 1.0) -> float:
    """gBB vocabulary-level diagonal cost in Frobenius norm: the sink's `κ √(N V / (V+1))` (SPEC §7)."""
    return gbb_sink_cost(V, K, kappa)


def gbb_cost(V: int, K: int, pattern: str, norm: str, kappa: float = 1.0) -> float:
    """The gBB vocabulary-level closed form of `pattern` (sink, diagonal) in `norm` (nuclear, frobenius)."""
    if pattern not in PATTERNS:
        raise SinkscopeError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if norm not in COST_NORMS:
        raise SinkscopeError(f"norm must be one of {COST_NORMS}, got {norm!r}")
    if pattern == "sink":
        return gbb_sink_cost(V, K, kappa)
    if norm == "nuclear":
        return gbb_diagonal_nuclear(V, K, kappa)
    return gbb_diagonal_frobenius(V, K, kappa)
