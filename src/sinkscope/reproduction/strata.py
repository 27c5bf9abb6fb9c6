"""Comparisons of two classes of heads *within* layers (strata), so that depth cannot stand in for the class.

When one class crowds into a few layers (SmolLM2 has 18 of its 28 non-sink heads in layers 10–11), a pooled
comparison measures the layers, not the class (Simpson's paradox). These estimators only ever compare heads of
the same layer:

- `stratified_difference`: Σ_l w_l (x̄_sink,l − x̄_other,l) / Σ_l w_l over layers holding both classes, with
  w_l = n_sink,l · n_other,l / (n_sink,l + n_other,l) (the Cochran–Mantel–Haenszel weight of a difference in
  means), and its standardised form, divided by the pooled within-layer, within-class standard deviation;
- `within_layer_permutation_p`: the one-sided p-value of that difference when class labels are permuted only
  within layers (reported, never deciding);
- `rowwise_spearman`: the mean over layers (rows) with ≥ `min_units` units of Spearman's ρ between two per-unit
  values.

`middle_layers` names the stratum of depth the middle-layer claims read (geometry, the certificates).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import rankdata


def middle_layers(n_layers: int, lower: float = 0.25, upper: float = 0.75) -> list[int]:
    """Layers l with lower ≤ l / (L-1) ≤ upper (at least one, for L ≥ 1)."""
    if n_layers <= 1:
        return list(range(n_layers))
    chosen = [layer for layer in range(n_layers) if lower <= layer / (n_layers - 1) <= upper]
    return chosen or [n_layers // 2]


def _layers_with_both(is_sink: np.ndarray, layers: np.ndarray) -> list:
    return [layer for layer in np.unique(layers) if 0 < is_sink[layers == layer].sum() < (layers == layer).sum()]


def stratified_difference(values: np.ndarray, is_sink: np.ndarray, layers: np.ndarray) -> tuple[float, float, int]:
    """`(difference, standardised difference, layers used)`: sink minus other, within layers (module docstring);
    NaN, NaN, 0 when no layer holds both classes."""
    values, is_sink, layers = np.asarray(values, float), np.asarray(is_sink, bool), np.asarray(layers)
    used = _layers_with_both(is_sink, layers)
    if not used:
        return math.nan, math.nan, 0
    weighted, weights, squares, dof = 0.0, 0.0, 0.0, 0
    for layer in used:
        x, s = values[layers == layer], is_sink[layers == layer]
        a, b = x[s], x[~s]
        w = a.size * b.size / (a.size + b.size)
        weighted, weights = weighted + w * (a.mean() - b.mean()), weights + w
        squares += ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()
        dof += a.size + b.size - 2
    difference = weighted / weights
    sd = math.sqrt(squares / dof) if dof > 0 else math.nan
    return float(difference), float(difference / sd) if sd and math.isfinite(sd) else math.nan, len(used)


def within_layer_permutation_p(values: np.ndarray, is_sink: np.ndarray, layers: np.ndarray, greater: bool,
                               n_perm: int = 1000, seed: int = 0) -> float:  # fmt: skip
    """One-sided p-value of `stratified_difference` (sink > other when `greater`) under labels permuted within
    layers: (1 + #{permuted ≥ observed}) / (1 + n_perm)."""
    values, is_sink, layers = np.asarray(values, float), np.asarray(is_sink, bool), np.asarray(layers)
    sign = 1.0 if greater else -1.0
    observed = sign * stratified_difference(values, is_sink, layers)[0]
    if not math.isfinite(observed):
        return math.nan
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(layers == layer) for layer in np.unique(layers)]
    hits = 0
    for _ in range(n_perm):
        permuted = is_sink.copy()
        for index in groups:
            permuted[index] = rng.permutation(is_sink[index])
        hits += sign * stratified_difference(values, permuted, layers)[0] >= observed - 1e-12
    return (1 + hits) / (1 + n_perm)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's ρ: the Pearson correlation of the average ranks (ties share their mean rank); NaN without
    spread."""
    rx, ry = rankdata(x), rankdata(y)
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def rowwise_spearman(x: np.ndarray, y: np.ndarray, min_units: float = 3) -> tuple[float, int]:
    """`(mean ρ, layers used)`: Spearman's ρ(x, y) within each row of (layers, units per layer) matrices that has
    some spread in both, averaged over those rows; rows of fewer than `min_units` units give NaN, 0 (the gate is a
    threshold of the claims that read it)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape[1] < min_units:
        return math.nan, 0
    rx, ry = rankdata(x, axis=1), rankdata(y, axis=1)
    rx, ry = rx - rx.mean(1, keepdims=True), ry - ry.mean(1, keepdims=True)
    sx, sy = np.sqrt((rx**2).sum(1)), np.sqrt((ry**2).sum(1))
    keep = (sx > 0) & (sy > 0)
    if not keep.any():
        return math.nan, 0
    rho = (rx * ry).sum(1)[keep] / (sx[keep] * sy[keep])
    return float(rho.mean()), int(keep.sum())
