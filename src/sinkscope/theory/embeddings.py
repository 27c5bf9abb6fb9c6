"""Synthetic attention inputs Z = (z_0..z_T) for the cost programs (SPEC §6); row 0 is the sink candidate (BOS).

Every row is unit-normalised, as attention inputs after RMSNorm lie near a sphere:
- `orthonormal`: z_0..z_T orthonormal (d = T+1; the cost is rotation-invariant, so one seed suffices);
- `gaussian`: isotropic Gaussian directions in R^d;
- `shared_mean:ρ`: `ρ μ + √(1-ρ²) g` for one random unit μ (anisotropy), z_0 included;
- `anti_aligned:ρ`: contexts as `shared_mean:ρ`, the sink `z_0 = -μ` (BOS opposite the contexts, SPEC §4);
- `low_rank:r`: isotropic Gaussian directions inside a random r-dim subspace (zero-mean, rank r).
"""

from __future__ import annotations

import math

import numpy as np

from sinkscope.errors import SinkscopeError

SYNTHETIC_FAMILIES = ("orthonormal", "gaussian", "shared_mean", "anti_aligned", "low_rank")


def unit_rows(x: np.ndarray) -> np.ndarray:
    """x with every row divided by its Euclidean norm."""
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def synthetic_embeddings(family: str, T: int, d: int, seed: int, rho: float = 0.5, rank: int = 4) -> np.ndarray:
    """(T+1, d) unit rows z_0..z_T of a synthetic family (module docstring); row 0 is the sink."""
    rng = np.random.default_rng(seed)
    if family == "orthonormal":
        if d < T + 1:
            raise SinkscopeError(f"orthonormal embeddings need d >= T+1, got d={d}, T={T}")
        q, _ = np.linalg.qr(rng.normal(size=(d, T + 1)))
        return q.T
    if family == "gaussian":
        return unit_rows(rng.normal(size=(T + 1, d)))
    if family in ("shared_mean", "anti_aligned"):
        mean = unit_rows(rng.normal(size=(1, d)))[0]
        noise = rng.normal(size=(T + 1, d)) / math.sqrt(d)  # rows of norm ≈ 1
        z = unit_rows(rho * mean + math.sqrt(1 - rho**2) * noise)
        if family == "anti_aligned":
            z[0] = -mean
        return z
    if family == "low_rank":
        if rank > d:
            raise SinkscopeError(f"low_rank:{rank} needs d >= {rank}, got d={d}")
        subspace = np.linalg.qr(rng.normal(size=(d, rank)))[0].T  # (rank, d) orthonormal rows
        return unit_rows(rng.normal(size=(T + 1, rank)) @ subspace)
    raise SinkscopeError(f"unknown synthetic family {family!r}; choose from {', '.join(SYNTHETIC_FAMILIES)}")
