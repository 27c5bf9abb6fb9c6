"""`AttentionReadout`: what the statistics need from one layer's attention, as the map-free paths deliver it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from torch import Tensor


@dataclass(frozen=True)
class AttentionReadout:
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


READOUT_FIELDS = tuple(field.name for field in fields(AttentionReadout))
"""The field names in order: sink, diag, prev, columns, entropy, out_norms."""


@dataclass(frozen=True)
class PackedReadout:
    """One layer's `AttentionReadout` still packed as a path left them: `unpack(parts)` gives them, and
    `unpack(torch.stack(parts of several layers))` gives theirs with a leading layer axis (fewer operations than
    unpacking each layer)."""

    parts: Tensor
    unpack: Callable[[Tensor], AttentionReadout]
