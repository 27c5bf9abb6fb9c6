"""Monte-Carlo simulator of the one-step attention block of SPEC §5, to check `theory.oversmoothing`.

It runs the block itself (real LayerNorm / RMSNorm, no linearisation) on Gaussian tokens `x_i ~ N(μ_i, Σ)`:
none `Y = X + A X W`; post `Y = LN(X + A X W)`; pre `Y = X + A LN(X) W`. Every function is vectorised over
samples (leading axis n) and reports standard errors, so the tests can hold the theory to SE-based tolerances.
Curves over λ reuse the same noise at every λ (common random numbers), so differences have small errors.
"""

from __future__ import annotations

import numpy as np

from sinkscope.theory.oversmoothing import check_norm, interpolated_attention


def sample_tokens(mu: np.ndarray, Sigma: np.ndarray, T: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n windows of T Gaussian tokens (n, T, d): `x_i = μ_i + ε_i`, `ε_i ~ N(0, Σ)` iid; μ (T, d) or (d,)."""
    d = np.shape(Sigma)[0]
    root = np.linalg.cholesky(np.asarray(Sigma, float) + 1e-12 * np.eye(d))
    noise = rng.standard_normal((n, T, d)) @ root.T
    return np.broadcast_to(np.asarray(mu, float), (T, d)) + noise


def normalise(X: np.ndarray, kind: str, gain: np.ndarray | None = None) -> np.ndarray:
    """LayerNorm (centre, divide by the std) or RMSNorm (divide by the RMS) over the last axis, times g."""
    check_norm("none", kind)
    if kind == "layernorm":
        X = X - X.mean(axis=-1, keepdims=True)
    out = X / np.sqrt(np.mean(X**2, axis=-1, keepdims=True))
    return out if gain is None else out * gain


def block_output(
    X: np.ndarray, W: np.ndarray, A: np.ndarray, norm: str, kind: str = "layernorm", gain: np.ndarray | None = None
) -> np.ndarray:
    """The block applied to tokens X (n, T, d) with attention A (T, T) and value-output map W (d, d)."""
    check_norm(norm, kind)
    if norm == "pre":
        return X + A @ normalise(X, kind, gain) @ W
    Y = X + A @ X @ W
    return normalise(Y, kind, gain) if norm == "post" else Y


def second_moment_samples(Y: np.ndarray, Q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """MC estimate of `E[y_i Q y_jᵀ]` (T, T) and its standard error (T, T), from samples Y (n, T, d)."""
    YQ = Y if Q is None else Y @ Q
    products = np.einsum("nid,njd->nij", YQ, Y)
    return products.mean(axis=0), products.std(axis=0, ddof=1) / np.sqrt(len(Y))


def mean_pairwise_cosine(Y: np.ndarray) -> np.ndarray:
    """Mean over pairs i ≠ j of cos(y_i, y_j), per sample: (n,) from Y (n, T, d)."""
    unit = Y / np.linalg.norm(Y, axis=-1, keepdims=True)
    T = Y.shape[-2]
    total = np.sum(unit.sum(axis=-2) ** 2, axis=-1)  # ||Σ_i ŷ_i||² = T + Σ_{i≠j} cos
    return (total - T) / (T * (T - 1))


def simulate_curve(
    mu: np.ndarray,
    Sigma: np.ndarray,
    W: np.ndarray,
    lambdas: np.ndarray,
    T: int,
    causal: bool,
    norm: str = "none",
    kind: str = "layernorm",
    gain: np.ndarray | None = None,
    n: int = 2000,
    seed: int = 0,
) -> np.ndarray:
    """Per-sample mean pairwise cosine of the block output at each λ: (n, len(lambdas)), common noise."""
    X = sample_tokens(mu, Sigma, T, n, np.random.default_rng(seed))
    return np.stack(
        [
            mean_pairwise_cosine(block_output(X, W, interpolated_attention(T, lam, causal), norm, kind, gain))
            for lam in lambdas
        ],
        axis=1,
    )


def value_moments(
    mu: np.ndarray,
    Sigma: np.ndarray,
    W: np.ndarray,
    T: int,
    kind: str,
    gain: np.ndarray | None = None,
    n: int = 20000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MC moments of the pre-norm value `v_k = LN(x_k) W`, per token: `ν` (T, d), `b_k`, `c_k` (T,).

    The inputs `second_moments_from_values` needs (`b_k = E[(x_k-μ_k)·(v_k-ν_k)]`, `c_k = E||v_k-ν_k||²`),
    estimated from n independent single tokens per position.
    """
    X = sample_tokens(mu, Sigma, T, n, np.random.default_rng(seed))
    V = normalise(X, kind, gain) @ W
    nu = V.mean(axis=0)
    x_centred = X - X.mean(axis=0)
    v_centred = V - nu
    b = np.einsum("ntd,ntd->t", x_centred, v_centred) / (n - 1)
    c = np.einsum("ntd,ntd->t", v_centred, v_centred) / (n - 1)
    return nu, b, c
