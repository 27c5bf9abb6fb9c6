"""BOS geometry of SPEC §4 (first part): how the sink candidate's representation sits among the others.

For a layer's residual input `h` or attention input `z` (B, T, d): cosines `cos(x_0, x_t)` for t ≥ 1, and the
norm ratio `||x_0|| / mean_{t≥1} ||x_t||` (a massive activation on BOS shows as a large ratio).
"""

from __future__ import annotations

from torch import Tensor


def bos_cosine(x: Tensor) -> Tensor:
    """`cos(x_0, x_t)` for t = 1..T-1. (..., T, d) → (..., T-1)."""
    unit = x.float() / x.float().norm(dim=-1, keepdim=True).clamp_min(1e-30)
    return (unit[..., 1:, :] @ unit[..., 0, :, None]).squeeze(-1)


def bos_norm_ratio(x: Tensor) -> Tensor:
    """`||x_0|| / mean_{t≥1} ||x_t||`. (..., T, d) → (...)."""
    norms = x.float().norm(dim=-1)
    return norms[..., 0] / norms[..., 1:].mean(-1)


def bos_geometry_sums(x: Tensor) -> dict[str, Tensor]:
    """Streaming sums over a batch (B, T, d): `cos_sum`, `cos_max` (a max), `cos_nonpos` (count of cos ≤ 0),
    `norm_ratio_sum` (sum over windows of the per-window ratio); all scalars (0-dim float64)."""
    cos = bos_cosine(x)
    return {
        "cos_sum": cos.double().sum(),
        "cos_max": cos.max(),
        "cos_nonpos": (cos <= 0).sum().double(),
        "norm_ratio_sum": bos_norm_ratio(x).double().sum(),
    }
