"""Means over a subset of query rows (e.g. the gBB lab's non-trigger queries), pooled over the windows of a batch.

A query mask is (B, Q) — one row of booleans per window — or (Q,), the same queries in every window. The masked
mean of per-query values `x` (B, ..., Q) is `Σ_{b,t} m[b,t] x[b,...,t] / Σ_{b,t} m[b,t]`: every selected
(window, query) pair weighs the same, so windows with more selected queries weigh more (→ (...); NaN when nothing
is selected).
"""

from __future__ import annotations

import torch
from torch import Tensor

from sinkscope.errors import SinkscopeError


def masked_query_mean(values: Tensor, query_mask: Tensor) -> Tensor:
    """Mean of `values` (B, ..., Q) over the queries where `query_mask` (B, Q) or (Q,) is true, pooled over the
    B windows (module doc). → (...)."""
    B, Q = values.shape[0], values.shape[-1]
    if query_mask.dtype != torch.bool or query_mask.shape not in ((Q,), (B, Q)):
        raise SinkscopeError(
            f"query mask of shape {tuple(query_mask.shape)} ({query_mask.dtype}): expected booleans of shape "
            f"({B}, {Q}) or ({Q},) for values of shape {tuple(values.shape)}"
        )
    return values.movedim(0, -2)[..., query_mask.expand(B, Q)].mean(-1)  # (..., B, Q)[mask] -> (..., n)
