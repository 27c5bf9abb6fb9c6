"""Closed forms of SPEC §6-§7 against the convex solver, and the margin/mass and Wendel formulas."""

import math

import cvxpy as cp
import numpy as np
import pytest
from scipy.optimize import linprog

from sinkscope.theory import cost_closed_forms as cf
from sinkscope.theory.cost import gbb_pattern_cost, pattern_cost


def random_orthonormal(rows: int, d: int, seed: int) -> np.ndarray:
    """(rows, d) orthonormal rows in a random orientation."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, rows)))
    return q.T


def min_norm_point(points: np.ndarray) -> np.ndarray:
    """The point of conv(rows of points) nearest the origin, by a simplex-constrained QP."""
    weights = cp.Variable(points.shape[0], nonneg=True)
    cp.Problem(cp.Minimize(cp.sum_squares(points.T @ weights)), [cp.sum(weights) == 1]).solve(solver="CLARABEL")
    return points.T @ weights.value


@pytest.mark.parametrize("T", [2, 5, 9])
@pytest.mark.parametrize("pattern", ["sink", "diagonal"])
@pytest.mark.parametrize("norm", ["nuclear", "frobenius"])
def test_orthonormal_closed_forms_match_clarabel(T, pattern, norm):
    Z = random_orthonormal(T + 1, T + 3, seed=T)
    result = pattern_cost(Z[0], Z[1:], pattern, norm, solver="clarabel")
    assert result.value == pytest.approx(cf.orthonormal_cost(T, pattern, norm), rel=1e-6)


def test_orthonormal_closed_form_values_by_hand():
    # T = 3: sink 3/2, diagonal √(1/2) + √(2/3) + √(3/4), Frobenius √(4 - 25/12)
    assert cf.orthonormal_sink_nuclear(3) == pytest.approx(1.5)
    assert cf.orthonormal_diagonal_nuclear(3) == pytest.approx(math.sqrt(0.5) + math.sqrt(2 / 3) + math.sqrt(0.75))
    assert cf.orthonormal_frobenius(3) == pytest.approx(math.sqrt(4 - 25 / 12))


@pytest.mark.parametrize("T", [6, 24])
@pytest.mark.parametrize("pattern", ["sink", "diagonal"])
@pytest.mark.parametrize("norm", ["nuclear", "frobenius"])
def test_orthonormal_closed_forms_match_scs(T, pattern, norm):
    Z = random_orthonormal(T + 1, T + 1, seed=T)
    result = pattern_cost(Z[0], Z[1:], pattern, norm, solver="scs" if T < 17 else "auto")
    assert result.solver == "scs"  # T = 24 is beyond auto's Clarabel range
    assert result.value == pytest.approx(cf.orthonormal_cost(T, pattern, norm), rel=1e-4)
    if norm == "nuclear":
        assert result.rank == (1 if pattern == "sink" else T)


@pytest.mark.parametrize("pattern", ["sink", "diagonal"])
def test_gbb_closed_forms_match_scs(pattern):
    result = gbb_pattern_cost(12, 3, pattern, "nuclear", solver="scs")
    assert result.value == pytest.approx(cf.gbb_cost(12, 3, pattern, "nuclear"), rel=1e-4)


@pytest.mark.parametrize("V,K", [(5, 2), (8, 3)])
@pytest.mark.parametrize("pattern", ["sink", "diagonal"])
@pytest.mark.parametrize("norm", ["nuclear", "frobenius"])
def test_gbb_closed_forms_match_solver(V, K, pattern, norm):
    embeddings = random_orthonormal(V + 1, V + 2, seed=V)
    result = gbb_pattern_cost(V, K, pattern, norm, embeddings=embeddings, solver="clarabel")
    assert result.value == pytest.approx(cf.gbb_cost(V, K, pattern, norm), rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("norm", ["nuclear", "frobenius"])
def test_noncausal_sink_cost_is_kappa_over_gamma1_gamma2(seed, norm):
    rng = np.random.default_rng(seed)
    d, T = 10, 6
    mean = rng.normal(size=d)
    mean /= np.linalg.norm(mean)
    contexts = 0.6 * mean + 0.4 * rng.normal(size=(T, d)) / math.sqrt(d)  # H1 holds through the shared mean
    sink = -0.5 * mean + 0.3 * rng.normal(size=d) / math.sqrt(d)
    gamma1 = np.linalg.norm(min_norm_point(contexts))
    gamma2 = np.linalg.norm(min_norm_point(contexts - sink))
    kappa = 2.0
    result = pattern_cost(sink, contexts, "sink", norm, causal=False, kappa=kappa)
    assert result.value == pytest.approx(kappa / (gamma1 * gamma2), rel=1e-5)
    assert cf.noncausal_sink_cost(gamma1, gamma2, kappa) == pytest.approx(kappa / (gamma1 * gamma2))
    assert result.rank == 1
    causal = pattern_cost(sink, contexts, "sink", norm, causal=True, kappa=kappa)
    assert causal.value <= result.value * (1 + 1e-6)  # fewer constraints: an upper bound


@pytest.mark.parametrize("T,delta", [(4, 0.1), (9, 0.01)])
def test_kappa_for_mass_guarantees_the_sink_mass(T, delta):
    kappa = cf.kappa_for_mass(T, delta)
    # worst case by hand: T competitors exactly kappa below the target
    logits = np.array([kappa] + [0.0] * T)
    assert np.exp(logits[0]) / np.exp(logits).sum() == pytest.approx(1 - delta)
    assert cf.mass_for_kappa(T, kappa) == pytest.approx(1 - delta)
    # and on a solved causal sink: every query puts >= 1 - delta on z_0
    rng = np.random.default_rng(T)
    Z = rng.normal(size=(T + 1, 3 * T))
    W = pattern_cost(Z[0], Z[1:], "sink", "frobenius", kappa=kappa).W
    for i in range(1, T + 1):
        row = Z[i] @ W @ Z[: i + 1].T
        attention = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        assert attention[0] >= 1 - delta - 1e-6


def in_open_halfspace(points: np.ndarray) -> bool:
    """H1 by an LP: some w with z_i · w >= 1 for every row."""
    result = linprog(np.zeros(points.shape[1]), A_ub=-points, b_ub=-np.ones(len(points)), bounds=(None, None))
    return result.status == 0


@pytest.mark.parametrize("T,d", [(8, 3), (12, 5)])
def test_wendel_probability_matches_monte_carlo(T, d):
    rng = np.random.default_rng(0)
    trials = 400
    hits = sum(in_open_halfspace(rng.normal(size=(T, d))) for _ in range(trials))
    p = cf.wendel_probability(T, d)
    assert abs(hits / trials - p) < 4 * math.sqrt(p * (1 - p) / trials)
    assert cf.wendel_probability(d, d) == 1.0


def test_closed_forms_are_linear_in_kappa():
    assert cf.orthonormal_diagonal_nuclear(7, 3.0) == pytest.approx(3 * cf.orthonormal_diagonal_nuclear(7))
    assert cf.gbb_diagonal_nuclear(9, 2, 0.5) == pytest.approx(0.5 * cf.gbb_diagonal_nuclear(9, 2))
