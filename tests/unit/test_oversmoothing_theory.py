"""SPEC §5 closed forms and identities, each against an independent computation (matrices, brute force)."""

import numpy as np
import pytest
from smoothing_mc import normalise

from sinkscope.errors import SinkscopeError
from sinkscope.theory import oversmoothing as th


def random_problem(d: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    root = rng.standard_normal((d, d)) / np.sqrt(d)
    return rng.standard_normal(d), root @ root.T + 0.2 * np.eye(d), rng.standard_normal((d, d)) / np.sqrt(d)


def brute_force_G(mu, sigma, W, A):
    """E[y_i·y_j] by expanding y_i = x_i + Σ_k A_ik x_k W term by term over token pairs (k, l)."""
    T, d = A.shape[0], sigma.shape[0]
    mu = np.broadcast_to(mu, (T, d))
    G = np.zeros((T, T))
    M = np.eye(T)[:, :, None, None] * np.eye(d) + A[:, :, None, None] * W  # y_i = Σ_k x_k M[i, k]
    for i in range(T):
        for j in range(T):
            for k in range(T):
                for l in range(T):
                    cov = sigma if k == l else np.zeros((d, d))
                    second = cov + np.outer(mu[k], mu[l])  # E[x_kᵀ x_l]
                    G[i, j] += np.trace(M[i, k].T @ second @ M[j, l])
    return G


@pytest.mark.parametrize("causal", [False, True])
def test_second_moments_match_term_by_term_expansion(causal):
    mu, sigma, W = random_problem(d=5)
    T = 4
    per_token = mu + np.random.default_rng(1).standard_normal((T, 5))
    A = th.interpolated_attention(T, 0.3, causal)
    np.testing.assert_allclose(th.second_moments(per_token, sigma, W, A), brute_force_G(per_token, sigma, W, A))


def test_value_moment_form_reduces_to_linear_form():
    mu, sigma, W = random_problem()
    T = 6
    A = th.interpolated_attention(T, 0.7, causal=True)
    per_token = mu + np.random.default_rng(2).standard_normal((T, len(mu)))
    _, b, c = th.smoothing_traces(sigma, W)
    G = th.second_moments_from_values(per_token, np.trace(sigma), per_token @ W, np.full(T, b), np.full(T, c), A)
    np.testing.assert_allclose(G, th.second_moments(per_token, sigma, W, A))


@pytest.mark.parametrize("lam", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("T", [2, 7])
def test_uniform_closed_forms_match_the_matrix_formula(lam, T):
    mu, sigma, W = random_problem()
    traces = th.smoothing_traces(sigma, W)
    M = th.shared_mean_energy(mu, W)
    for causal, closed in ((False, th.full_uniform_cosine(M, traces, lam, T)), (True, th.causal_uniform_cosine(M, traces, lam, T))):
        G = th.second_moments(mu, sigma, W, th.interpolated_attention(T, lam, causal))
        assert closed == pytest.approx(th.mean_expected_cosine(G), rel=1e-12)


def test_full_uniform_limit_is_the_large_T_value():
    """The T → ∞ form (2) against the finite-T closed form (checked against matrices above) at T = 10⁶."""
    mu, sigma, W = random_problem()
    traces, M = th.smoothing_traces(sigma, W), th.shared_mean_energy(mu, W)
    for lam in (0.0, 0.6, 1.0):
        assert th.full_uniform_cosine(M, traces, lam) == pytest.approx(th.full_uniform_cosine(M, traces, lam, 10**6), abs=1e-5)


@pytest.mark.parametrize("scale", [-2.5, -1.5, -0.8, -0.3, 0.5])
def test_condition_and_peak_match_the_limit_curve(scale):
    """Sign of 2b + c and the argmax of the T → ∞ curve, read off a fine λ grid, for W = scale·I + noise."""
    mu, sigma, noise = random_problem(seed=3)
    W = scale * np.eye(len(mu)) + 0.2 * noise
    condition = th.smoothing_condition(sigma, W)
    traces, M = th.smoothing_traces(sigma, W), th.shared_mean_energy(mu, W)
    grid = np.linspace(0, 1, 20001)
    curve = np.array([th.full_uniform_cosine(M, traces, lam) for lam in grid])
    assert condition.dense_smooths_more == (curve[-1] > curve[0])
    assert condition.lambda_peak == pytest.approx(grid[np.argmax(curve)], abs=1e-4)


def test_value_traces_with_identity_map_are_the_linear_traces():
    _, sigma, W = random_problem()
    assert th.value_traces(sigma, sigma, W) == pytest.approx(th.smoothing_traces(sigma, W)[1:])


def test_factored_value_traces_match_the_dense_map():
    _, sigma, W = random_problem()
    rng = np.random.default_rng(6)
    left, right, cross = rng.standard_normal((12, 3)), rng.standard_normal((3, 12)), rng.standard_normal((12, 12))
    assert th.value_traces(cross, sigma, left, right) == pytest.approx(th.value_traces(cross, sigma, left @ right))
    assert th.value_traces(cross, sigma, left @ right) == pytest.approx(
        (np.trace(left @ right @ cross), np.trace(right.T @ left.T @ sigma @ left @ right))
    )


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norm_scale_is_the_rms_of_the_centred_tokens(kind):
    mu, sigma, _ = random_problem()
    P = th.centring(len(mu), kind)
    assert th.norm_scale(mu, sigma, kind) == pytest.approx(np.sqrt((mu @ P @ P @ mu + np.trace(P @ sigma @ P)) / len(mu)))


def test_beta_scales_the_value_path():
    _, sigma, W = random_problem()
    assert th.smoothing_condition(sigma, W, beta=0.3)[:2] == pytest.approx(th.smoothing_condition(sigma, 0.3 * W)[:2])
    b, c = th.smoothing_condition(sigma, W)[:2]
    assert (b, c) == pytest.approx((np.trace(sigma @ W), np.trace(W.T @ sigma @ W)))


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_post_norm_cosine_is_the_Q_cosine(kind):
    rng = np.random.default_rng(4)
    Y, gain = rng.standard_normal((2, 9)) + 1.0, rng.uniform(0.5, 2, 9)
    Z = normalise(Y, kind, gain)
    Q = th.post_norm_metric(9, kind, gain)
    cos_z = Z[0] @ Z[1] / np.linalg.norm(Z[0]) / np.linalg.norm(Z[1])
    assert cos_z == pytest.approx(Y[0] @ Q @ Y[1] / np.sqrt((Y[0] @ Q @ Y[0]) * (Y[1] @ Q @ Y[1])))


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_pre_norm_map_is_exact_when_every_token_has_the_same_scale(kind):
    rng = np.random.default_rng(5)
    d = 10
    X = rng.standard_normal((6, d))
    P = th.centring(d, kind)
    X = X / np.linalg.norm(X @ P, axis=1, keepdims=True) * 3.0  # every ||x P|| = 3
    W, gain = rng.standard_normal((d, d)), rng.uniform(0.5, 2, d)
    W_tilde = th.pre_norm_map(X, np.zeros((d, d)), W, kind, gain)  # per-token means, no noise
    np.testing.assert_allclose(normalise(X, kind, gain) @ W, X @ W_tilde, atol=1e-12)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(SinkscopeError, match="lambda"):
        th.interpolated_attention(4, 1.5, causal=True)
    with pytest.raises(SinkscopeError, match="norm"):
        th.block_moments(np.zeros(3), np.eye(3), np.eye(3), np.eye(2), norm="sandwich")
