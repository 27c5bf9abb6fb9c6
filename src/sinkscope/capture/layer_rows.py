"""`LayerRows`: what the statistics need from one layer's attention, as the map-free paths deliver it."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class LayerRows:
    """What the statistics of SPEC §2–§3 need from one layer's attention over a batch, without the map.

    `sink`, `diag`, `prev`: `A[t,0]`, `A[t,t]`, `A[t,t-1]` (0 at t = 0), (B, H, T) float32; `columns`:
    `c_k = Σ_{t≥k} A[t,k]`, (B, H, T) float64; `entropy`: `Σ_{t≥1} H(A[t,:]) / log(t+1)` in nats, (B, H) float64;
    `out_norms`: `||o_t||` of each head's output before the output projection, (B, H, T) float32.
    """

    sink: Tensor
    diag: Tensor
    prev: Tensor
    columns: Tensor
    entropy: Tensor
    out_norms: Tensor
