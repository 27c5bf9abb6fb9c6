"""The reduced-basis cost solver (SPEC §6) against a direct d×d solve, linearity, and infeasibility."""

import cvxpy as cp
import numpy as np
import pytest

from sinkscope.errors import SinkscopeError
from sinkscope.theory.cost import InfeasiblePatternError, ProblemTooLargeError, pattern_cost


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def full_solve(Z: np.ndarray, pattern: str, norm: str, kappa: float = 1.0) -> float:
    """The causal pattern cost over all d×d matrices, written out constraint by constraint."""
    d = Z.shape[1]
    W = cp.Variable((d, d))
    constraints = []
    for i in range(1, Z.shape[0]):
        if pattern == "sink":
            constraints += [Z[i] @ W @ (Z[0] - Z[j]) >= kappa for j in range(1, i + 1)]
        else:
            constraints += [Z[i] @ W @ (Z[i] - Z[j]) >= kappa for j in range(0, i)]
    objective = cp.normNuc(W) if norm == "nuclear" else cp.norm(W, "fro")
    problem = cp.Problem(cp.Minimize(objective), constraints)
    problem.solve(solver="CLARABEL")
    return problem.value


@pytest.mark.parametrize("T,d", [(4, 9), (6, 4)])
@pytest.mark.parametrize("pattern", ["sink", "diagonal"])
@pytest.mark.parametrize("norm", ["nuclear", "frobenius"])
def test_reduced_solve_equals_full_solve(T, d, pattern, norm):
    rng = np.random.default_rng(T * d)
    mean = np.ones(d) / np.sqrt(d)
    Z = unit_rows(0.7 * mean + rng.normal(size=(T + 1, d)) / np.sqrt(d))  # d=4 < T+1: rank-deficient span
    Z[0] = -mean  # keeps the sink feasible
    result = pattern_cost(Z[0], Z[1:], pattern, norm)
    assert result.W.shape == (d, d)
    assert result.value == pytest.approx(full_solve(Z, pattern, norm), rel=1e-6)
    norm_of_W = np.linalg.svd(result.W, compute_uv=False)
    assert (norm_of_W.sum() if norm == "nuclear" else np.sqrt((norm_of_W**2).sum())) == pytest.approx(
        result.value, rel=1e-5
    )


@pytest.mark.parametrize("pattern", ["sink", "diagonal"])
def test_returned_W_satisfies_the_margins(pattern):
    rng = np.random.default_rng(3)
    T, kappa = 7, 1.5
    Z = rng.normal(size=(T + 1, 20)) * 4.0  # norms far from 1 exercise the internal rescaling
    W = pattern_cost(Z[0], Z[1:], pattern, "nuclear", kappa=kappa).W
    margins = [
        Z[i] @ W @ ((Z[0] if pattern == "sink" else Z[i]) - Z[j])
        for i in range(1, T + 1)
        for j in (range(1, i + 1) if pattern == "sink" else range(i))
    ]
    assert min(margins) >= kappa * (1 - 1e-6)
    assert min(margins) == pytest.approx(kappa, rel=1e-4)  # optimal: some margin is tight


@pytest.mark.parametrize("pattern", ["sink", "diagonal"])
@pytest.mark.parametrize("norm", ["nuclear", "frobenius"])
def test_cost_is_linear_in_kappa(pattern, norm):
    rng = np.random.default_rng(5)
    Z = unit_rows(rng.normal(size=(7, 12)))
    Z[0] = -Z[1:].mean(axis=0) / np.linalg.norm(Z[1:].mean(axis=0))
    one = pattern_cost(Z[0], Z[1:], pattern, norm, kappa=1.0).value
    assert pattern_cost(Z[0], Z[1:], pattern, norm, kappa=3.7).value == pytest.approx(3.7 * one, rel=1e-6)


def test_orthonormal_sink_is_rank_one_and_diagonal_full_rank():
    Z = np.eye(9)
    assert pattern_cost(Z[0], Z[1:], "sink", "nuclear").rank == 1
    assert pattern_cost(Z[0], Z[1:], "diagonal", "nuclear").rank == 8


def test_antipodal_contexts_make_the_sink_infeasible():
    e = np.array([1.0, 0.0, 0.0])
    contexts = np.array([e, -e, [0.0, 1.0, 0.0]])
    with pytest.raises(InfeasiblePatternError, match="H1"):
        pattern_cost(np.array([0.0, 0.0, 1.0]), contexts, "sink")
    with pytest.raises(InfeasiblePatternError, match="H1"):
        pattern_cost(np.array([0.0, 0.0, 1.0]), contexts, "sink", causal=False)


def test_sink_inside_the_hull_is_infeasible():
    contexts = np.array([[1.0, 0.0, 0.2], [0.0, 1.0, 0.2], [0.3, 0.3, 1.0]])
    with pytest.raises(InfeasiblePatternError, match="H2"):
        pattern_cost(contexts[:2].mean(axis=0), contexts, "sink", "frobenius")


def test_repeated_token_makes_the_diagonal_infeasible():
    z = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    with pytest.raises(InfeasiblePatternError, match="z_3 lies in the convex hull"):
        pattern_cost(z[0], z[1:], "diagonal")


def test_too_large_problem_names_the_closed_form():
    Z = np.eye(80)
    with pytest.raises(ProblemTooLargeError, match="orthonormal_cost"):
        pattern_cost(Z[0], Z[1:], "sink")


def test_bad_inputs_raise_sinkscope_errors():
    with pytest.raises(SinkscopeError, match="shape"):
        pattern_cost(np.ones(3), np.ones((4, 5)))
    with pytest.raises(SinkscopeError, match="kappa"):
        pattern_cost(np.ones(3), np.eye(3), kappa=0.0)
    with pytest.raises(SinkscopeError, match="pattern"):
        pattern_cost(np.ones(3), np.eye(3), pattern="previous")
