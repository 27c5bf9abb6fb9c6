"""Sink representability as two half-space conditions, with certificates (SPEC §3-4).

Embeddings are row vectors: `z_0` (the sink candidate, BOS) and contexts `z_1..z_T`. A `W_QK` with
`z_i W (z_0 - z_j)ᵀ ≥ κ > 0` for every context pair (i, j) exists iff

- **(H1)** `0 ∉ conv{z_1..z_T}` (the contexts lie in an open half-space), and
- **(H2)** `z_0 ∉ conv{z_1..z_T}`.

With `γ1 = dist(0, conv{z_i})` (minimiser `p`) and `γ2 = dist(z_0, conv{z_j})` (`q = z_0 - closest point`),
the best normalised margin `max_W min_ij z_i W (z_0 - z_j)ᵀ / ||W||` is `γ1·γ2` for the nuclear, Frobenius
and operator norms, attained by `W = p qᵀ / (|p||q|)`: queries read along `p`, keys along `q`.

How the verdicts are decided (docs/theory/geometry.md has the argument):
1. `p` and `q` come from the min-norm-point problems `min_{w ∈ Δ} ||w Z - target||²`, each solved exactly as
   one non-negative least-squares problem (`min_norm_point`: milliseconds per layer where a general QP took
   ~0.1–1 s).
2. A condition **holds** when the min-norm-point direction separates strictly, checked in float64:
   `min_i z_i·p̂ > SEPARATION_TOL` (H1), `min_j (z_0 - z_j)·q̂ > SEPARATION_TOL` (H2). A strictly separating
   direction is a proof, whatever the solver's accuracy.
3. Otherwise an exact LP (HiGHS simplex) finds convex weights minimising the ℓ1 residual
   `||w Z - target||₁`; the condition **fails** when the residual of the returned weights, recomputed in
   float64, is at most `HULL_TOL` × the largest input norm. The weights are the proof, and `γ` is set to 0.
   (A squared-norm solution only gets `γ` down to ~1e-5 on such inputs, which is why it does not decide.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sinkscope.errors import SinkscopeError

# A min-norm-point direction must separate by more than this (on unit-scale inputs, float64 dot products of d ≤ 10^4
# terms carry rounding ≤ ~1e-12) for its condition to count as proven to hold.
SEPARATION_TOL = 1e-9
# Convex weights whose float64 ℓ1 residual is at most this × max input norm prove "target ∈ hull" up to a
# perturbation of that size; HiGHS's basic solutions reach ≤ 1e-13 on the degenerate cases tested.
HULL_TOL = 1e-9
# Subsample cap for pooled context samples per layer.
GEOMETRY_SAMPLE_CAP = 512
# Singular values of the context matrix above this fraction of the largest count towards its numerical
# rank: above float32 activation noise (~1e-7 relative), far below the spectrum's meaningful part.
SPAN_RTOL = 1e-4


@dataclass(frozen=True, eq=False)
class SinkGeometry:
    """The half-space certificates of SPEC §4 for one set of contexts and one sink.

    gamma1, gamma2: the distances `dist(0, conv Z)`, `dist(z_0, conv Z)` (0 when the condition fails).
    h1, h2: whether (H1), (H2) hold; both ⇔ a sink is representable.
    margin: `γ1·γ2`, the best normalised margin of any W_QK (0 when not representable).
    certificate_margin: `min_ij z_i W (z_0 - z_j)ᵀ` of the rank-1 `W = p̂ q̂ᵀ` computed directly (≈ margin).
    query_dir: `p/|p|` (d,), key_dir: `q/|q|` (d,); None when their condition fails.
    h1_weights: (T,) convex weights with `w Z ≈ 0` when H1 fails; h2_weights: with `w Z ≈ z_0` when H2 fails.
    """

    gamma1: float
    gamma2: float
    h1: bool
    h2: bool
    margin: float
    certificate_margin: float
    query_dir: np.ndarray | None = field(repr=False)
    key_dir: np.ndarray | None = field(repr=False)
    h1_weights: np.ndarray | None = field(default=None, repr=False)
    h2_weights: np.ndarray | None = field(default=None, repr=False)

    @property
    def representable(self) -> bool:
        return self.h1 and self.h2


def min_norm_point(points: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closest point of `conv(points)` to `target`, as one non-negative least-squares problem.

    points: (T, d); target: (d,). Returns `(w, r)`: convex weights (T,) and the residual `r = target - w·points`
    (d,), whose norm is the distance. With `P = points - target` (T, d), solve
    `min_{u ≥ 0} |Pᵀu|² + (1ᵀu - 1)²` (NNLS on the (d+1)×T matrix `[Pᵀ; 1ᵀ]` against `[0; 1]`, Lawson–Hanson
    active set in SciPy) and set `w = u / 1ᵀu`. Why this is exact: for `u = s·w` with `w ∈ Δ` the objective is
    `s²|x_w|² + (s-1)²`, minimised at `s = 1/(1+|x_w|²)` with value `|x_w|²/(1+|x_w|²)`, increasing in `|x_w|`,
    so the optimal direction is the minimum-norm point's weights. Milliseconds per layer where a general QP
    solver took ~0.1–1 s; accuracy ~1e-9 in `|r|`, worse near 0 — a verdict never rests on `|r|` alone.
    """
    from scipy.optimize import nnls

    points = np.asarray(points, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    T, d = points.shape
    system = np.vstack([(points - target).T, np.ones((1, T))])  # (d+1, T)
    rhs = np.zeros(d + 1)
    rhs[d] = 1.0
    try:
        u, _ = nnls(system, rhs, maxiter=50 * T + 100)
    except RuntimeError as err:  # SciPy's iteration limit
        raise SinkscopeError(f"the minimum-norm-point NNLS did not converge on {T} points: {err}") from err
    if not u.sum() > 0:
        raise SinkscopeError(f"the minimum-norm-point NNLS returned no weights on {T} points")
    weights = u / u.sum()
    return weights, target - weights @ points


def hull_weights_l1(points: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """Convex weights minimising `||w·points - target||₁` by an exact LP (HiGHS simplex).

    points: (T, d); target: (d,). Returns `(w, residual)` with the residual recomputed in float64 from the
    returned weights. Variables `[w (T), s⁺ (d), s⁻ (d)]`: `pointsᵀ w - s⁺ + s⁻ = target`, `Σw = 1`, all ≥ 0.
    """
    from scipy.optimize import linprog

    T, d = points.shape
    cost = np.concatenate([np.zeros(T), np.ones(2 * d)])
    a_eq = np.zeros((d + 1, T + 2 * d))
    a_eq[:d, :T] = points.T
    a_eq[:d, T : T + d] = -np.eye(d)
    a_eq[:d, T + d :] = np.eye(d)
    a_eq[d, :T] = 1.0
    b_eq = np.concatenate([target, [1.0]])
    result = linprog(cost, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs-ds")
    if result.status != 0:
        raise SinkscopeError(f"the hull-membership LP failed on {T} points: {result.message}")
    weights = np.clip(result.x[:T], 0.0, None)
    weights /= weights.sum()
    return weights, float(np.abs(weights @ points - target).sum())


def _hull_condition(
    points: np.ndarray, target: np.ndarray
) -> tuple[bool, float, np.ndarray | None, np.ndarray | None]:
    """Whether `target ∉ conv(points)`: `(holds, distance, unit direction or weights)` per the module docstring.

    Returns `(holds, gamma, direction (d,) | None-if-fails, weights (T,) | None-if-holds)`; the direction `r̂`
    satisfies `r̂·(target - z_j) > 0` for every point z_j when the condition holds.
    """
    weights, residual = min_norm_point(points, target)
    gamma = float(np.linalg.norm(residual))
    if gamma > 0:
        direction = residual / gamma
        if float(np.min((target - points) @ direction)) > SEPARATION_TOL:
            return True, gamma, direction, None
    scale = max(1.0, float(np.max(np.linalg.norm(points, axis=1))), float(np.linalg.norm(target)))
    lp_weights, l1_residual = hull_weights_l1(points, target)
    if l1_residual <= HULL_TOL * scale:
        return False, 0.0, None, lp_weights
    # Near-degenerate: the distance is positive but below what the solver separates reliably; it still holds.
    return True, gamma, residual / gamma if gamma > 0 else None, None


def sink_geometry(contexts: np.ndarray, sink: np.ndarray) -> SinkGeometry:
    """Half-space conditions (H1), (H2), distances γ1, γ2 and the rank-1 certificate of SPEC §4.

    contexts: (T, d) rows `z_1..z_T`; sink: (d,) `z_0`. Pure function: no model, no I/O. Vectors are taken as
    given (the per-layer analysis unit-normalises them first, see `layer_geometry`).
    """
    contexts = np.asarray(contexts, dtype=np.float64)
    sink = np.asarray(sink, dtype=np.float64)
    if contexts.ndim != 2 or contexts.shape[0] == 0 or sink.shape != (contexts.shape[1],):
        raise SinkscopeError(
            f"sink_geometry needs contexts of shape (T ≥ 1, d) and a sink of shape (d,); got {contexts.shape} "
            f"and {sink.shape}"
        )
    if not (np.isfinite(contexts).all() and np.isfinite(sink).all()):
        raise SinkscopeError("sink_geometry got non-finite embeddings (NaN or inf); check the captured inputs")
    h1, gamma1, query_dir, h1_weights = _hull_condition(contexts, np.zeros_like(sink))
    # (H1)'s residual is 0 - p; the query direction is p itself.
    query_dir = None if query_dir is None else -query_dir
    h2, gamma2, key_dir, h2_weights = _hull_condition(contexts, sink)
    certificate = 0.0
    if query_dir is not None and key_dir is not None:
        certificate = float(np.min(contexts @ query_dir) * np.min((sink - contexts) @ key_dir))
    return SinkGeometry(
        gamma1=gamma1,
        gamma2=gamma2,
        h1=h1,
        h2=h2,
        margin=gamma1 * gamma2 if h1 and h2 else 0.0,
        certificate_margin=certificate if h1 and h2 else 0.0,
        query_dir=query_dir,
        key_dir=key_dir,
        h1_weights=h1_weights,
        h2_weights=h2_weights,
    )


def span_assumptions(contexts: np.ndarray, sink: np.ndarray, rtol: float = SPAN_RTOL) -> tuple[int, float]:
    """The switch theorem's assumption quantities (SPEC §3): `(numerical rank, relative distance)`.

    contexts: (T, d); sink: (d,). Rank = number of singular values of `contexts` above `rtol` × the largest;
    relative distance = `|z_0 - P z_0| / |z_0|` with P the projection onto the span of those singular vectors
    (0: the sink lies in the contexts' span; 1: it is orthogonal to it).
    """
    contexts = np.asarray(contexts, dtype=np.float64)
    sink = np.asarray(sink, dtype=np.float64)
    _, s, vt = np.linalg.svd(contexts, full_matrices=False)
    rank = int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0
    basis = vt[:rank]  # (rank, d), orthonormal rows
    norm = float(np.linalg.norm(sink))
    if norm == 0:
        return rank, 0.0
    return rank, float(np.linalg.norm(sink - (sink @ basis.T) @ basis) / norm)


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def layer_geometry(
    samples: dict[int, tuple[np.ndarray, np.ndarray]],
    cap: int = GEOMETRY_SAMPLE_CAP,
    seed: int = 0,
    on_readout: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Per-layer sink geometry on unit-normalised attention inputs (SPEC §3-4), one row per layer.

    samples: `{layer: (z0 (d,), contexts (N, d))}`, contexts pooled across windows (z_0 is the same in every
    window). Both are unit-normalised here; N above `cap` is subsampled without replacement (seeded). `analyze`
    passes its `geometry_cap` (`--geometry-cap`, default 256); `GEOMETRY_SAMPLE_CAP` = 512 is the default of
    direct callers only.
    Columns: layer, gamma1, gamma2, sink_margin (γ1·γ2), sink_representable, h1, h2, context_rank,
    sink_span_distance, n_contexts. `on_readout(layer)` is called after each layer (for a progress display).
    """
    rows = []
    rng = np.random.default_rng(seed)
    for layer in sorted(samples):
        z0, contexts = samples[layer]
        contexts = np.asarray(contexts, dtype=np.float64)
        if contexts.shape[0] > cap:
            contexts = contexts[np.sort(rng.choice(contexts.shape[0], cap, replace=False))]
        contexts = _unit_rows(contexts)
        sink = _unit_rows(np.asarray(z0, dtype=np.float64))
        geometry = sink_geometry(contexts, sink)
        rank, distance = span_assumptions(contexts, sink)
        rows.append(
            {
                "layer": int(layer),
                "gamma1": geometry.gamma1,
                "gamma2": geometry.gamma2,
                "sink_margin": geometry.margin,
                "sink_representable": geometry.representable,
                "h1": geometry.h1,
                "h2": geometry.h2,
                "context_rank": rank,
                "sink_span_distance": distance,
                "n_contexts": int(contexts.shape[0]),
            }
        )
        if on_readout is not None:
            on_readout(int(layer))
    return pd.DataFrame(rows)


def control_separations(contexts: np.ndarray, n_control: int, seed: int = 0) -> np.ndarray:
    """γ₂ of random context tokens: `dist(z_r, conv{z_j : j ≠ r})` for `n_control` distinct r (seeded), 0 when
    z_r lies in the others' hull. The control of the representability test: with fewer context tokens than
    dimensions every token is a vertex of the others' hull and passes (H2), so BOS's γ₂ only means something
    beside these. contexts: (N, d) → (n_control,)."""
    contexts = np.asarray(contexts, dtype=np.float64)
    picks = np.random.default_rng(seed).choice(contexts.shape[0], min(n_control, contexts.shape[0]), replace=False)
    return np.array([_hull_condition(np.delete(contexts, r, axis=0), contexts[r])[1] for r in picks])
