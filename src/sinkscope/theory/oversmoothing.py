"""One attention step with skip and optional LayerNorm: when does dense attention smooth more? (SPEC §5).

Model (row vectors): tokens `x_i = μ_i + ε_i` with iid noise `ε_i` of mean 0 and covariance Σ (Gaussianity is
not needed for the second moments), a row-stochastic `A`, a value-output map `W` (d×d) and the block
`Y = X + A X W`. With `a = tr Σ`, `b = tr(ΣW)`, `c = tr(WᵀΣW)` and `m_i = μ_i + Σ_k A_ik μ_k W`, exactly

    G_ij = E[y_i·y_j] = m_i·m_j + a δ_ij + b (A_ij + A_ji) + c (AAᵀ)_ij,

and the ratio predictor `E cos(y_i, y_j) ≈ G_ij / sqrt(G_ii G_jj)` (error O(1/d)). Attention interpolates
between the identity and uniform attention `U` (full or causal): `A_λ = (1-λ) I + λ U`.

Norm variants (`norm=`): "none" as above; "post" (`LN(Y)`: its cosines are the cosines of Y in the metric
`Q = P diag(g)² P`, so every trace gets a `Q`: `a = tr(ΣQ)`, `b = tr(ΣWQ)`, `c = tr(WᵀΣWQ)`); "pre" (attention
reads `LN(x)`, the skip carries x: `LN(x) W ≈ x W̃` with `W̃ = P diag(g) W / s_LN`,
`s_LN² = (mean_i ||μ_i P||² + tr(PΣP)) / d`). `kind=` "layernorm" centres (`P = I - 11ᵀ/d`), "rmsnorm" does
not (`P = I`). Norm biases and the norm's epsilon are left out. Derivations: docs/theory/oversmoothing.md.
Pure numpy; no model code.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sinkscope.errors import SinkscopeError

NORM_PLACEMENTS = ("none", "post", "pre")
NORM_KINDS = ("layernorm", "rmsnorm")


class Traces(NamedTuple):
    """The three traces of SPEC §5 (in the metric Q where one applies): `a = tr(ΣQ)`, `b`, `c`."""

    a: float
    b: float
    c: float


class SmoothingCondition(NamedTuple):
    """`smoothing_condition`'s answer (SPEC §5, full uniform attention, T → ∞).

    `dense_smooths_more` ⇔ `2b + c > 0`; `lambda_peak` is the λ in [0, 1] where the predicted cosine is
    largest: `1 + b/c` when `-c < b < 0` (the inverted U), 1 when `b ≥ 0`, 0 when `b ≤ -c`; NaN when `b = c = 0`
    (attention has no effect).
    """

    b: float
    c: float
    dense_smooths_more: bool
    lambda_peak: float


# ---- attention patterns ------------------------------------------------------------------------------------


def uniform_attention(T: int, causal: bool) -> np.ndarray:
    """Uniform attention `U` (T, T): every entry 1/T (full) or `U_ij = 1/(i+1)` for j ≤ i (causal)."""
    if T < 1:
        raise SinkscopeError(f"T (number of tokens) must be >= 1, got {T}")
    if not causal:
        return np.full((T, T), 1.0 / T)
    return np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]


def interpolated_attention(T: int, lam: float, causal: bool) -> np.ndarray:
    """`A_λ = (1-λ) I + λ U` (T, T): λ = 0 is the identity (sparse), λ = 1 uniform (dense)."""
    if not 0.0 <= lam <= 1.0:
        raise SinkscopeError(f"lambda (attention density) must be in [0, 1], got {lam}")
    return (1.0 - lam) * np.eye(T) + lam * uniform_attention(T, causal)


# ---- exact second moments and the ratio predictor ------------------------------------------------------------


def smoothing_traces(Sigma: np.ndarray, W: np.ndarray, Q: np.ndarray | None = None) -> Traces:
    """`a = tr(ΣQ)`, `b = tr(ΣWQ)`, `c = tr(WᵀΣWQ)` for Σ, W, Q of shape (d, d); Q = I by default."""
    Sigma, W = np.asarray(Sigma, float), np.asarray(W, float)
    Q = np.eye(Sigma.shape[0]) if Q is None else np.asarray(Q, float)
    sigma_w = Sigma @ W
    # tr(XY) = sum(X * Yᵀ): no d×d×d product beyond ΣW.
    return Traces(
        a=float(np.sum(Sigma * Q.T)),
        b=float(np.sum(sigma_w * Q.T)),
        c=float(np.sum((W.T @ sigma_w) * Q.T)),
    )


def second_moments(
    mu: np.ndarray, Sigma: np.ndarray, W: np.ndarray, A: np.ndarray, Q: np.ndarray | None = None
) -> np.ndarray:
    """Exact `G_ij = E[y_i Q y_jᵀ]` (T, T) for `Y = X + A X W` (SPEC §5), Q = I by default.

    `mu` is (T, d) per-token means or (d,) one shared mean; Σ (d, d) the noise covariance; A (T, T) any
    row-stochastic (or indeed any) matrix. Exact for any iid noise with covariance Σ.
    """
    A = np.asarray(A, float)
    T = A.shape[0]
    mu = np.broadcast_to(np.asarray(mu, float), (T, np.shape(Sigma)[0]))
    Q = np.eye(mu.shape[1]) if Q is None else np.asarray(Q, float)
    m = mu + A @ mu @ W  # (T, d): the means of y
    a, b, c = smoothing_traces(Sigma, W, Q)
    return m @ Q @ m.T + a * np.eye(T) + b * (A + A.T) + c * (A @ A.T)


def second_moments_from_values(
    mu: np.ndarray, a: float, nu: np.ndarray, b_tokens: np.ndarray, c_tokens: np.ndarray, A: np.ndarray
) -> np.ndarray:
    """Exact `G_ij = E[y_i·y_j]` (T, T) for `y_i = x_i + Σ_k A_ik v_k`, `v_k = f(x_k)` any per-token map.

    Tokens independent, `x_k` of mean μ_k (T, d) and total variance `a = tr Σ`; `ν_k = E v_k` (T, d),
    `b_k = E[(x_k-μ_k)·(v_k-ν_k)]` (T,), `c_k = E||v_k-ν_k||²` (T,). Then with `m_i = μ_i + Σ_k A_ik ν_k`,
    `G_ij = m_i·m_j + a δ_ij + A_ji b_i + A_ij b_j + Σ_k A_ik A_jk c_k`. A linear `f(x) = xW` gives
    `ν_k = μ_k W`, `b_k = tr(ΣW)`, `c_k = tr(WᵀΣW)` (`second_moments`); pre-norm attention has
    `f(x) = LN(x) W`, whose moments have no closed form (estimate them, or linearise with `pre_norm_map`).
    """
    A = np.asarray(A, float)
    T = A.shape[0]
    mu = np.broadcast_to(np.asarray(mu, float), np.shape(nu))
    b_tokens, c_tokens = np.asarray(b_tokens, float), np.asarray(c_tokens, float)
    m = mu + A @ nu
    cross = A.T * b_tokens[:, None]  # (i, j) -> A_ji b_i
    return m @ m.T + a * np.eye(T) + cross + cross.T + (A * c_tokens) @ A.T


def expected_cosine(G: np.ndarray) -> np.ndarray:
    """The ratio predictor `E cos(y_i, y_j) ≈ G_ij / sqrt(G_ii G_jj)` for every pair, (T, T)."""
    diag = np.sqrt(np.diag(G))
    return G / np.outer(diag, diag)


def mean_expected_cosine(G: np.ndarray) -> float:
    """The ratio predictor averaged over the pairs i ≠ j: the predicted mean pairwise cosine."""
    C = expected_cosine(G)
    T = C.shape[0]
    if T < 2:
        raise SinkscopeError("a mean pairwise cosine needs at least 2 tokens")
    return float((C.sum() - np.trace(C)) / (T * (T - 1)))


# ---- norm variants --------------------------------------------------------------------------------------------


def check_norm(norm: str, kind: str) -> None:
    if norm not in NORM_PLACEMENTS:
        raise SinkscopeError(f"norm must be one of {NORM_PLACEMENTS}, got {norm!r}")
    if kind not in NORM_KINDS:
        raise SinkscopeError(f"norm kind must be one of {NORM_KINDS}, got {kind!r}")


def centring(d: int, kind: str) -> np.ndarray:
    """`P = I - 11ᵀ/d` for LayerNorm, `I` for RMSNorm (d, d)."""
    check_norm("none", kind)
    return np.eye(d) - (np.full((d, d), 1.0 / d) if kind == "layernorm" else 0.0)


def post_norm_metric(d: int, kind: str, gain: np.ndarray | None = None) -> np.ndarray:
    """`Q = P diag(g)² P` (d, d): `LN(y_i)·LN(y_j) ∝ y_i Q y_jᵀ`, so post-norm cosines are Q-cosines of Y."""
    P = centring(d, kind)
    g = np.ones(d) if gain is None else np.asarray(gain, float)
    return P @ np.diag(g**2) @ P


def norm_scale(mu: np.ndarray, Sigma: np.ndarray, kind: str) -> float:
    """`s_LN = sqrt((mean_i ||μ_i P||² + tr(PΣP)) / d)`: the root-mean-square scale the norm divides by."""
    Sigma = np.asarray(Sigma, float)
    d = Sigma.shape[0]
    mu = np.atleast_2d(np.asarray(mu, float))
    spread = np.trace(Sigma)
    if kind == "layernorm":  # μP = μ - mean(μ); tr(PΣP) = tr(PΣ) = tr Σ - 1ᵀΣ1/d
        mu = mu - mu.mean(axis=1, keepdims=True)
        spread -= Sigma.sum() / d
    return float(np.sqrt((np.mean(np.sum(mu**2, axis=1)) + spread) / d))


def pre_norm_map(
    mu: np.ndarray, Sigma: np.ndarray, W: np.ndarray, kind: str, gain: np.ndarray | None = None
) -> np.ndarray:
    """`W̃ = P diag(g) W / s_LN` (d, r): pre-norm attention `A LN(X) W ≈ A X W̃` (SPEC §5).

    W is the map (d, d) or a left factor (d, r) of it (`W = W_left W_right` gives `W̃ = W̃_left W_right`).
    Exact except that every token's own norm scale is replaced by the common `s_LN` (relative error O(1/√d)
    per token, O(1/d) in the second moments).
    """
    check_norm("pre", kind)
    d = np.shape(Sigma)[0]
    g = np.ones(d) if gain is None else np.asarray(gain, float)
    scaled = g[:, None] * np.asarray(W, float)
    if kind == "layernorm":  # P M = M minus its column means
        scaled = scaled - scaled.mean(axis=0, keepdims=True)
    return scaled / norm_scale(mu, Sigma, kind)


def block_moments(
    mu: np.ndarray,
    Sigma: np.ndarray,
    W: np.ndarray,
    A: np.ndarray,
    norm: str = "none",
    kind: str = "layernorm",
    gain: np.ndarray | None = None,
) -> np.ndarray:
    """The (T, T) matrix G whose ratio predicts the block output's cosines, for each norm variant.

    none: `E[y_i·y_j]` of `X + AXW` (exact). post: `E[y_i Q y_jᵀ]` (exact; cos(LN(y_i), LN(y_j)) is the Q-cosine
    of y). pre: `E[y_i·y_j]` of `X + A X W̃` (the linearised pre-norm block). `gain` is the norm's per-channel
    gain g (d,); for "pre" it is folded into W here, so pass the raw `W_V W_O`.
    """
    check_norm(norm, kind)
    d = np.shape(Sigma)[0]
    if norm == "post":
        return second_moments(mu, Sigma, W, A, post_norm_metric(d, kind, gain))
    if norm == "pre":
        return second_moments(mu, Sigma, pre_norm_map(mu, Sigma, W, kind, gain), A)
    return second_moments(mu, Sigma, W, A)


def predicted_curve(
    mu: np.ndarray,
    Sigma: np.ndarray,
    W: np.ndarray,
    lambdas: np.ndarray,
    T: int,
    causal: bool,
    norm: str = "none",
    kind: str = "layernorm",
    gain: np.ndarray | None = None,
) -> np.ndarray:
    """Predicted mean pairwise cosine of the block output at each λ (len(lambdas),), general means and Σ."""
    return np.array(
        [
            mean_expected_cosine(
                block_moments(mu, Sigma, W, interpolated_attention(T, lam, causal), norm, kind, gain)
            )
            for lam in lambdas
        ]
    )


# ---- closed forms for a shared mean ---------------------------------------------------------------------------


def shared_mean_energy(mu: np.ndarray, W: np.ndarray, Q: np.ndarray | None = None) -> float:
    """`M = ||μ(I+W)||²_Q`: with one shared mean μ (d,), every `m_i = μ(I+W)` since A's rows sum to 1."""
    m = np.asarray(mu, float) @ (np.eye(len(mu)) + W)
    return float(m @ m) if Q is None else float(m @ Q @ m)


def full_uniform_cosine(M: float, traces: Traces, lam: float, T: int | None = None) -> float:
    """Ratio predictor for full uniform `A_λ` and a shared mean, in closed form (SPEC §5).

    With `s = 1-λ`: `(AAᵀ)_ii = s² + (2sλ+λ²)/T`, `(AAᵀ)_ij = (2sλ+λ²)/T`, so every pair has the same cosine
    `(M + (2bλ + c(2sλ+λ²))/T) / (M + a + 2b(s+λ/T) + c(s² + (2sλ+λ²)/T))`; T = None is the limit
    `M / (M + a + 2sb + s²c)`.
    """
    a, b, c = traces
    s = 1.0 - lam
    mix = 0.0 if T is None else (2 * s * lam + lam**2) / T
    off = M + (0.0 if T is None else 2 * b * lam / T) + c * mix
    diag = M + a + 2 * b * (s + (0.0 if T is None else lam / T)) + c * (s**2 + mix)
    return off / diag


def causal_uniform_cosine(M: float, traces: Traces, lam: float, T: int) -> float:
    """Pair-averaged ratio predictor for causal uniform `A_λ` and a shared mean, in closed form (SPEC §5).

    `(UUᵀ)_ij = 1/(max(i,j)+1)`, so for i > j: `G_ij = M + (bλ + c(sλ+λ²))/(i+1)` and
    `G_ii = M + a + 2b(s + λ/(i+1)) + c(s² + (2sλ+λ²)/(i+1))`; the mean over pairs is an O(T²) sum.
    """
    a, b, c = traces
    s = 1.0 - lam
    inv = 1.0 / np.arange(1, T + 1)  # 1/(i+1), i = 0..T-1
    diag = M + a + 2 * b * (s + lam * inv) + c * (s**2 + (2 * s * lam + lam**2) * inv)
    i, j = np.tril_indices(T, k=-1)
    off = M + (b * lam + c * (s * lam + lam**2)) * inv[i]
    return float(np.mean(off / np.sqrt(diag[i] * diag[j])))


def smoothing_condition(Sigma: np.ndarray, W: np.ndarray, beta: float = 1.0) -> SmoothingCondition:
    """Does dense attention smooth more than the identity? `2b + c > 0` with `b = β tr(ΣW)`, `c = β² tr(WᵀΣW)`.

    SPEC §5 (the paper's `2β tr(BW) + β² tr(WᵀBW) < 0` means attention resists smoothing; it needs b < 0).
    Σ is the covariance the head sees and W its value-output map; β the gain on the value path. The sign of
    d cos/dλ at λ is the sign of `b + (1-λ)c` (full uniform, T → ∞), hence `lambda_peak`.
    """
    _, b, c = smoothing_traces(Sigma, beta * np.asarray(W, float))
    return SmoothingCondition(b=b, c=c, dense_smooths_more=bool(2 * b + c > 0), lambda_peak=peak_lambda(b, c))


def value_traces(
    cross: np.ndarray, value_input_cov: np.ndarray, W: np.ndarray, W_right: np.ndarray | None = None
) -> tuple[float, float]:
    """`b = tr(W C_xz)`, `c = tr(Wᵀ Σ_z W)` for values `v = zW` of a per-token map `z = f(x)` (SPEC §5).

    `cross` = `C_xz = E[(x-μ)ᵀ(z-μ_z)]` (d, d), `value_input_cov` = `Σ_z = Cov(z)` (d, d): the `b_k`, `c_k` of
    `second_moments_from_values` for identically distributed tokens. With `z = x` they are `tr(ΣW)`, `tr(WᵀΣW)`;
    with `z = LN(x)` they measure the pre-norm block without linearising the norm. Given `W_right`, W is the left
    factor (d, r) of `W W_right` (a head's `W_V` (d, dh) and `W_O` (dh, d)): O(d²r) instead of O(d³).
    """
    left = np.asarray(W, float)
    if W_right is None:
        return float(np.sum(left * np.asarray(cross).T)), float(np.sum((value_input_cov @ left) * left))
    right = np.asarray(W_right, float)
    b = float(np.sum((right @ cross) * left.T))  # tr(L R C) = Σ (R C) ⊙ Lᵀ
    c = float(np.sum((left.T @ value_input_cov @ left) * (right @ right.T)))  # tr(Rᵀ Lᵀ Σ_z L R)
    return b, c


def peak_lambda(b: float, c: float) -> float:
    """The λ in [0, 1] maximising `M / (M + a + 2(1-λ)b + (1-λ)²c)` (c ≥ 0); see `SmoothingCondition`."""
    if b == 0 and c == 0:
        return float("nan")
    if b >= 0:
        return 1.0
    if b <= -c:
        return 0.0
    return 1.0 + b / c
