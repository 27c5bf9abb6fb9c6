"""SPEC §5 theory against a Monte-Carlo run of the block itself, over a grid of d, masks, norms and W.

Tolerances are the issue's: second moments within 3 standard errors (the MC's own), the ratio predictor
within `3/d + 3·SE` of the MC mean cosine, and the predicted sign of Δcos between adjacent λ wherever the MC
change is larger than 5 SE. Pre-norm second moments are exact given the value moments of `LN(x)W`, which
come from an independent, larger single-token MC; its error enters the tolerance as `sqrt(1 + n/n_values)`.
"""

import zlib

import numpy as np
import pytest
import smoothing_mc as mc

from sinkscope.theory import oversmoothing as th

T = 8
N_SAMPLES = 2000
N_VALUES = 6000
LAMBDAS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
W_KINDS = ("random", "minus_identity", "minus_half", "low_rank", "identity")
NORMS = (("none", "layernorm"), ("post", "layernorm"), ("post", "rmsnorm"), ("pre", "layernorm"), ("pre", "rmsnorm"))


def make_case(d: int, w_kind: str, seed: int):
    """Per-token means around a shared mean, a random full-rank Σ, a W of the named kind, a random gain."""
    rng = np.random.default_rng(seed)
    root = rng.standard_normal((d, d)) / np.sqrt(d)
    sigma = root @ root.T + 0.5 * np.eye(d)
    mu = 0.8 * rng.standard_normal(d) + 0.3 * rng.standard_normal((T, d))
    if w_kind == "random":
        W = rng.standard_normal((d, d)) / np.sqrt(d)
    elif w_kind == "minus_identity":
        W = -np.eye(d) + 0.1 * rng.standard_normal((d, d)) / np.sqrt(d)
    elif w_kind == "minus_half":
        W = -0.5 * np.eye(d)
    elif w_kind == "low_rank":
        rank = d // 8
        W = 2 * rng.standard_normal((d, rank)) @ rng.standard_normal((rank, d)) / np.sqrt(d * rank)
    else:
        W = np.eye(d)
    gain = rng.uniform(0.5, 1.5, d)
    return mu, sigma, W, gain, rng


def grid():
    for d in (16, 64):
        for causal in (False, True):
            for norm, kind in NORMS:
                for w_kind in W_KINDS:
                    yield pytest.param(d, causal, norm, kind, w_kind, id=f"d{d}-{'causal' if causal else 'full'}-{norm}-{kind}-{w_kind}")


@pytest.mark.parametrize("d, causal, norm, kind, w_kind", list(grid()))
def test_theory_matches_monte_carlo(d, causal, norm, kind, w_kind):
    seed = zlib.crc32(f"{d}{causal}{norm}{kind}{w_kind}".encode())
    mu, sigma, W, gain, rng = make_case(d, w_kind, seed=d)
    A = th.interpolated_attention(T, 0.5, causal)

    # 1. second moments: exact for none and post (the Q-metric), exact given LN(x)W's moments for pre.
    X = mc.sample_tokens(mu, sigma, T, N_SAMPLES, rng)
    Y = mc.block_output(X, W, A, "pre" if norm == "pre" else "none", kind, gain)
    Q = th.post_norm_metric(d, kind, gain) if norm == "post" else np.eye(d)
    slack = 1.0
    if norm == "pre":
        nu, b, c = mc.value_moments(mu, sigma, W, T, kind, gain, n=N_VALUES, seed=seed + 1)
        G = th.second_moments_from_values(mu, np.trace(sigma), nu, b, c, A)
        slack = np.sqrt(1 + N_SAMPLES / N_VALUES)
    else:
        G = th.block_moments(mu, sigma, W, A, norm, kind, gain)
    products = np.einsum("nid,njd->nij", Y @ Q, Y)  # (n, T, T) samples of y_i Q y_jᵀ
    G_mc, se = mc.second_moment_samples(Y, Q)
    # 4 SE on each of the T(T+1)/2 entries (Bonferroni: 36 entries at 3 SE would fail by chance about once
    # in 10 cases), 3 SE on the mean of the diagonal and the mean off the diagonal.
    z = np.abs(G_mc - G) / (se * slack)
    assert z.max() < 4, f"max z {z.max():.2f}"
    for mask in (np.eye(T, dtype=bool), ~np.eye(T, dtype=bool)):
        per_sample = products[:, mask].mean(axis=1)
        err = abs(per_sample.mean() - G[mask].mean())
        assert err < 3 * slack * per_sample.std(ddof=1) / np.sqrt(N_SAMPLES)

    # 2. ratio predictor (the linearised one for pre) vs the MC mean pairwise cosine, along λ.
    curves = mc.simulate_curve(mu, sigma, W, LAMBDAS, T, causal, norm, kind, gain, n=N_SAMPLES, seed=seed + 2)
    predicted = th.predicted_curve(mu, sigma, W, LAMBDAS, T, causal, norm, kind, gain)
    mean, se_cos = curves.mean(axis=0), curves.std(axis=0, ddof=1) / np.sqrt(N_SAMPLES)
    assert np.all(np.abs(mean - predicted) <= 3 / d + 3 * se_cos), (mean, predicted)

    # 3. sign of the change between adjacent λ, wherever the MC change is clear (common random numbers).
    steps = np.diff(curves, axis=1)
    step_mean, step_se = steps.mean(axis=0), steps.std(axis=0, ddof=1) / np.sqrt(N_SAMPLES)
    clear = np.abs(step_mean) > 5 * step_se
    assert np.all(np.sign(np.diff(predicted))[clear] == np.sign(step_mean)[clear])


def test_inverted_u_peaks_where_the_formula_says():
    """-c < b < 0: with W = -2.5 I and Σ = I, λ* = 1 + b/c = 0.6; the MC curve rises before and falls after."""
    d, T_long, n = 64, 48, 1000
    rng = np.random.default_rng(7)
    mu = rng.standard_normal(d)
    sigma, W = np.eye(d), -2.5 * np.eye(d)
    condition = th.smoothing_condition(sigma, W)
    assert -condition.c < condition.b < 0
    assert condition.lambda_peak == pytest.approx(0.6)
    lambdas = np.linspace(0, 1, 11)
    curves = mc.simulate_curve(mu, sigma, W, lambdas, T_long, causal=False, n=n, seed=3)
    steps = np.diff(curves, axis=1)
    step_mean, step_se = steps.mean(axis=0), steps.std(axis=0, ddof=1) / np.sqrt(n)
    midpoints = (lambdas[1:] + lambdas[:-1]) / 2
    before, after = midpoints < condition.lambda_peak - 0.1, midpoints > condition.lambda_peak + 0.1
    assert np.all(step_mean[before] > 3 * step_se[before])
    assert np.all(step_mean[after] < -3 * step_se[after])
    assert abs(lambdas[np.argmax(curves.mean(axis=0))] - condition.lambda_peak) <= 0.1
