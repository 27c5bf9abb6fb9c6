"""BOS geometry of SPEC §4 (first part): how the sink candidate's representation sits among the others.

For a layer's residual input `h` or attention input `z` (B, T, d): cosines `cos(x_0, x_t)` for t ≥ 1, and the
norm ratio `||x_0|| / mean_{t≥1} ||x_t||` (a massive activation on BOS shows as a large ratio).
"""

from __future__ import annotations

import torch
from torch import Tensor


def bos_cosine(x: Tensor) -> Tensor:
    """`cos(x_0, x_t)` for t = 1..T-1. (..., T, d) → (..., T-1)."""
    unit = x.float() / x.float().norm(dim=-1, keepdim=True).clamp_min(1e-30)
    return (unit[..., 1:, :] @ unit[..., 0, :, None]).squeeze(-1)


def bos_norm_ratio(x: Tensor) -> Tensor:
    """`||x_0|| / mean_{t≥1} ||x_t||`. (..., T, d) → (...)."""
    return norm_ratio(x.float().norm(dim=-1))


def norm_ratio(norms: Tensor) -> Tensor:
    """`||x_0|| / mean_{t≥1} ||x_t||` from the norms `||x_t||`. (..., T) → (...)."""
    return norms[..., 0] / norms[..., 1:].mean(-1)


def bos_dots(x: Tensor) -> Tensor:
    """`x_t·x_0` for t = 0..T-1, in float32. (..., T, d) → (..., T). (A product and a sum: three dispatched
    operations where `x @ x_0` takes eight.)"""
    x = x.float()
    return (x * x[..., :1, :]).sum(-1)


def bos_geometry_sums(x: Tensor) -> dict[str, Tensor]:
    """Streaming sums over a batch (..., B, T, d): `bos_geometry_sums_from` its norms and `bos_dots`."""
    return bos_geometry_sums_from(x.float().norm(dim=-1), bos_dots(x))


def bos_geometry_sums_from(norms: Tensor, dots: Tensor) -> dict[str, Tensor]:
    """Streaming sums over a batch from the norms `||x_t||` and the dot products `x_t·x_0` (`bos_dots`), both
    (..., B, T): `cos_sum`, `cos_max` (a max), `cos_nonpos` (count of cos ≤ 0) over t ≥ 1, `norm_ratio_sum` (sum
    over windows of the per-window ratio); each (...) float64 (leading dimensions, e.g. layers, are kept).
    `cos(x_0, x_t) = x_t·x_0 / (max(||x_t||, 1e-30) max(||x_0||, 1e-30))`, as `bos_cosine` has it."""
    safe = norms.clamp_min(1e-30)
    cos = dots[..., 1:] / (safe[..., 1:] * safe[..., :1])
    return {
        "cos_sum": cos.sum((-2, -1), dtype=torch.float64),
        "cos_max": cos.amax((-2, -1)).double(),
        "cos_nonpos": (cos <= 0).sum((-2, -1), dtype=torch.float64),
        "norm_ratio_sum": norm_ratio(norms).sum(-1, dtype=torch.float64),
    }
