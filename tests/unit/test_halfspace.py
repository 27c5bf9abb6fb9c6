"""Sink geometry (SPEC §4) against independent computations: closed forms, constructions, and the SDP."""

from __future__ import annotations

import numpy as np
import pytest

from sinkscope.errors import SinkscopeError
from sinkscope.theory.halfspace import layer_geometry, sink_geometry, span_assumptions


def _check_convex(weights: np.ndarray, n: int) -> None:
    assert weights.shape == (n,)
    assert (weights >= 0).all()
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("T", [1, 3, 7])
def test_orthonormal_contexts_closed_form(T):
    # Contexts e_1..e_T: the closest hull point to 0 is the centroid, |centroid| = 1/√T; a unit sink
    # orthogonal to them is at distance √(1 + 1/T).
    d = T + 2
    basis = np.linalg.qr(np.random.default_rng(T).normal(size=(d, d)))[0]  # rotate away from the axes
    contexts, sink = basis[:T], basis[T + 1]
    geometry = sink_geometry(contexts, sink)
    assert geometry.h1 and geometry.h2 and geometry.representable
    assert geometry.gamma1 == pytest.approx(1 / np.sqrt(T), abs=1e-7)
    assert geometry.gamma2 == pytest.approx(np.sqrt(1 + 1 / T), abs=1e-7)
    assert geometry.margin == pytest.approx(np.sqrt(1 + 1 / T) / np.sqrt(T), abs=1e-6)
    np.testing.assert_allclose(geometry.query_dir, contexts.mean(0) * np.sqrt(T), atol=1e-6)
    assert geometry.h1_weights is None and geometry.h2_weights is None


def test_antipodal_contexts_fail_h1_with_weights():
    rng = np.random.default_rng(1)
    u, v, sink = rng.normal(size=(3, 16))
    contexts = np.stack([u, v, -u, 0.5 * v + u])
    geometry = sink_geometry(contexts, sink)
    assert not geometry.h1 and not geometry.representable
    assert geometry.gamma1 == 0.0 and geometry.margin == 0.0 and geometry.query_dir is None
    _check_convex(geometry.h1_weights, 4)
    assert np.linalg.norm(geometry.h1_weights @ contexts) < 1e-10


@pytest.mark.parametrize("T,d", [(4, 3), (64, 32), (128, 160)])
def test_sink_inside_hull_fails_h2(T, d):
    rng = np.random.default_rng(T)
    contexts = rng.normal(size=(T, d)) + 2.0  # all in a half-space: H1 holds
    contexts /= np.linalg.norm(contexts, axis=1, keepdims=True)
    sink = rng.dirichlet(np.ones(T)) @ contexts
    geometry = sink_geometry(contexts, sink)
    assert geometry.h1 and not geometry.h2
    assert geometry.gamma2 == 0.0 and geometry.key_dir is None
    _check_convex(geometry.h2_weights, T)
    assert np.abs(geometry.h2_weights @ contexts - sink).sum() < 1e-10


@pytest.mark.parametrize("eps", [1e-3, 1e-4, 1e-6])
def test_sink_just_outside_hull_holds(eps):
    # Contexts on the plane x = 1, symmetric around (1,0,0): dist(0, hull) = 1; the sink (1+eps, 0, 0) is at
    # distance eps. A verdict made by thresholding the squared-norm QP's γ (~1e-5 accurate) would fail here.
    contexts = np.array([[1, 1, 0], [1, -1, 0], [1, 0, 1], [1, 0, -1.0]])
    geometry = sink_geometry(contexts, np.array([1 + eps, 0.0, 0.0]))
    assert geometry.h1 and geometry.h2
    assert geometry.gamma1 == pytest.approx(1.0, abs=1e-7)
    assert geometry.gamma2 == pytest.approx(eps, rel=1e-2)


def _random_representable(seed: int, T: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    offset = rng.normal(size=d)
    offset *= 3.0 / np.linalg.norm(offset)
    contexts = rng.normal(size=(T, d)) + offset
    contexts /= np.linalg.norm(contexts, axis=1, keepdims=True)
    sink = rng.normal(size=d) - offset
    return contexts, sink / np.linalg.norm(sink)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_margin_equals_inverse_min_nuclear_norm_sdp(seed):
    import cvxpy as cp

    contexts, sink = _random_representable(seed, T=6, d=4)
    geometry = sink_geometry(contexts, sink)
    assert geometry.representable

    # Independent: the non-causal sink constraint set z_i W (z_0 - z_j)ᵀ ≥ 1 for all contexts i, j, solved as a
    # nuclear-norm SDP; the best normalised margin is 1 / min ||W||_*.
    W = cp.Variable((4, 4))
    constraints = [contexts @ W @ (sink - contexts).T >= 1]
    nuclear = cp.Problem(cp.Minimize(cp.normNuc(W)), constraints)
    nuclear.solve(solver="CLARABEL")
    frobenius = cp.Problem(cp.Minimize(cp.norm(W, "fro")), constraints)
    frobenius.solve(solver="CLARABEL")

    assert geometry.margin == pytest.approx(1 / nuclear.value, abs=1e-5)
    assert geometry.margin == pytest.approx(1 / frobenius.value, abs=1e-5)
    # The returned rank-1 certificate, evaluated directly over every (i, j) pair.
    W1 = np.outer(geometry.query_dir, geometry.key_dir)
    direct = np.min(contexts @ W1 @ (sink - contexts).T)
    assert direct == pytest.approx(geometry.margin, abs=1e-5)
    assert geometry.certificate_margin == pytest.approx(direct, abs=1e-12)


def test_bad_shapes_raise():
    with pytest.raises(SinkscopeError, match="shape"):
        sink_geometry(np.zeros((3, 4)), np.zeros(5))
    with pytest.raises(SinkscopeError, match="non-finite"):
        sink_geometry(np.full((3, 4), np.nan), np.zeros(4))


def test_span_assumptions():
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.normal(size=(10, 10)))[0]
    contexts = rng.normal(size=(20, 3)) @ basis[:3]  # rank 3
    sink = 0.6 * basis[0] + 0.8 * basis[5]  # distance 0.8 from the span
    rank, distance = span_assumptions(contexts, sink)
    assert rank == 3
    assert distance == pytest.approx(0.8, abs=1e-10)
    assert span_assumptions(contexts, basis[1])[1] == pytest.approx(0.0, abs=1e-10)


def test_layer_geometry_normalises_and_subsamples():
    contexts, sink = _random_representable(5, T=40, d=6)
    scaled = contexts * np.random.default_rng(0).uniform(0.5, 30, size=(40, 1))
    frame = layer_geometry({2: (7 * sink, scaled), 0: (sink, np.vstack([contexts, -contexts]))})
    assert list(frame["layer"]) == [0, 2]
    unit = sink_geometry(contexts, sink)  # the same vectors, already unit norm
    row = frame.set_index("layer").loc[2]
    assert row["sink_representable"] == unit.representable
    assert row["gamma1"] == pytest.approx(unit.gamma1, abs=1e-7)
    assert row["gamma2"] == pytest.approx(unit.gamma2, abs=1e-7)
    assert row["sink_margin"] == pytest.approx(unit.margin, abs=1e-7)
    assert row["context_rank"] == 6 and row["sink_span_distance"] == pytest.approx(0.0, abs=1e-9)
    assert not frame.set_index("layer").loc[0, "h1"]  # ±contexts: 0 is in the hull
    assert list(layer_geometry({0: (sink, scaled)}, cap=10)["n_contexts"]) == [10]


def test_nonpositive_bos_cosine_implies_h2():
    # SPEC §4 corollary: cos(z_0, z_j) ≤ 0 for all j ⇒ z_0·(z_0 - z_j) ≥ |z_0|² > 0, so (H2) holds, γ2 ≥ |z_0|.
    rng = np.random.default_rng(4)
    sink = rng.normal(size=12)
    contexts = rng.normal(size=(50, 12))
    contexts -= np.maximum(contexts @ sink, 0)[:, None] * sink / (sink @ sink)  # project onto cos ≤ 0
    assert (contexts @ sink <= 1e-12).all()
    geometry = sink_geometry(contexts, sink)
    assert geometry.h2 and geometry.gamma2 >= np.linalg.norm(sink) - 1e-7


@pytest.mark.parametrize("T,d,shift", [(40, 30, 0.0), (40, 30, 0.5), (120, 16, 0.2), (30, 200, 0.0)])
def test_min_norm_point_matches_a_general_qp_and_its_optimality_condition(T, d, shift):
    # Independent checks: Clarabel's interior-point QP on the same problem, and the first-order condition of
    # the minimum-norm point x of conv(P): x·P_j ≥ |x|² for every j.
    import cvxpy as cp

    from sinkscope.theory.halfspace import min_norm_point

    rng = np.random.default_rng(T + d)
    points = rng.normal(size=(T, d)) + shift
    target = rng.normal(size=d) * 0.1
    weights, residual = min_norm_point(points, target)
    _check_convex(weights, T)
    w = cp.Variable(T)
    cp.Problem(cp.Minimize(cp.sum_squares(points.T @ w - target)), [w >= 0, cp.sum(w) == 1]).solve("CLARABEL")
    assert np.linalg.norm(residual) == pytest.approx(np.linalg.norm(target - w.value @ points), abs=1e-6)
    x = -residual  # = w·P with P = points - target
    assert ((points - target) @ x).min() >= x @ x - 1e-10
