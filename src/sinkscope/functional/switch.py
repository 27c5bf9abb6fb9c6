"""Attention-switch statistics of SPEC §3 as pure functions over head outputs and value norms.

`o_t = Σ_j A[t,j] v_j` is a head's output before the output projection (`v_j` its value vector, shared within a
GQA group). A query is *switched off* when `||o_t|| ≤ τ · mean_{j≤t} ||v_j||`, the mean over the keys query t can
see (causal); the paper proves switched-off ⇔ sink under mild assumptions, which the 2×2 table
(switched-off × hard-sink) tests.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from sinkscope.functional.patterns import later_queries


def value_drain(value_norms: Tensor) -> Tensor:
    """Guo et al. 2024's value drain `||v_0|| / mean_{j≥1} ||v_j||` (SPEC §3). (..., T) → (...)."""
    return value_norms[..., 0] / value_norms[..., 1:].mean(-1)


def visible_value_mean(value_norms: Tensor, stop: int | None = None) -> Tensor:
    """`mean_{j≤t} ||v_j||` for every query t < stop (the keys a causal query t can see, SPEC §3), in float64.
    (..., T) → (..., stop); `stop` defaults to T."""
    norms = (value_norms if stop is None or stop >= value_norms.shape[-1] else value_norms[..., :stop]).double()
    return norms.cumsum(-1) / _counts(norms.shape[-1], str(norms.device))


@functools.lru_cache(maxsize=64)
def _counts(n: int, device: str) -> Tensor:
    """`[1, 2, …, n]` in float64 (keys visible to queries 0..n-1), made once per n and device."""
    return torch.arange(1, n + 1, device=device, dtype=torch.float64)


def switched_off(out_norms: Tensor, value_norms: Tensor, tau: float, q_start: int = 0) -> Tensor:
    """SPEC §3 hard switch: query t is off when `||o_t|| ≤ τ · mean_{j≤t} ||v_j||` (visible keys only).
    `out_norms` (..., Q) `||o_t||` of queries `q_start..q_start+Q-1`, `value_norms` (..., T) `||v_j||` of the
    window's keys → (..., Q) booleans."""
    stop = q_start + out_norms.shape[-1]
    visible = visible_value_mean(value_norms, stop)
    return out_norms.double() <= tau * (visible[..., q_start:] if q_start else visible)


def switch_block_sums(
    out_norms: Tensor, value_norms: Tensor, hard_sink: Tensor, q_start: int, tau: float
) -> dict[str, Tensor]:
    """Streaming sums of SPEC §3 over one block of queries.

    `out_norms` (B, H, Q): `||o_t||` for queries `q_start..q_start+Q-1`; `value_norms` (B, H, T): `||v_j||` of
    each head's (GQA-shared) values, of which query t sees `j ≤ t`; `hard_sink` (B, H, Q): `A[t,0] ≥ 1-δ`
    (false at t = 0); leading dimensions (e.g. layers) of all three are kept.
    Returns per-head (..., H) sums: `ahon` (Σ ||o_t|| over all t) and the 2×2 counts over queries t ≥ 1:
    `n_off_sink`, `n_off_nosink`, `n_on_sink`, `n_on_nosink`. Three counts are taken at once (off ∧ sink, off,
    sink) and the other cells follow by difference from the number of queries t ≥ 1 (exact: integer counts).
    """
    B, Q = out_norms.shape[-3], out_norms.shape[-1]
    valid = later_queries(q_start, Q, str(out_norms.device))
    off = switched_off(out_norms, value_norms, tau, q_start) & valid
    sink = hard_sink & valid
    off_sink, n_off, n_sink = torch.stack([off & sink, off, sink]).sum((-3, -1), dtype=torch.float64).unbind(0)
    on_sink = n_sink - off_sink
    queries = B * int(valid.shape[0] - (q_start == 0))  # (window, query t ≥ 1) pairs of the block, per head
    return {
        "ahon": out_norms.sum((-3, -1), dtype=torch.float64),
        "n_off_sink": off_sink,
        "n_off_nosink": n_off - off_sink,
        "n_on_sink": on_sink,
        "n_on_nosink": (queries - n_off) - on_sink,
    }


def finalize_switch(sums: dict[str, Tensor], windows: int, seq_len: int) -> dict[str, Tensor]:
    """Per-head SPEC §3 scores of one layer from accumulated sums (each (H,)).

    `ahon_ln` divides by the mean AHON over the layer's heads (Sandoval-Segura et al. 2025); `switch_agreement`
    is P(hard-sink | switched-off), NaN when no query was switched off.
    """
    ahon = sums["ahon"] / (windows * seq_len)
    n_off = sums["n_off_sink"] + sums["n_off_nosink"]
    return {
        "ahon": ahon,
        "ahon_ln": ahon / ahon.mean(),
        "value_drain": sums["value_drain"] / windows,
        "switch_off_frac": n_off / (windows * (seq_len - 1)),
        "switch_agreement": torch.where(n_off > 0, sums["n_off_sink"] / n_off.clamp_min(1), torch.nan),
    }


def context_value_spectrum(values: Tensor) -> Tensor:
    """Singular values, largest first, of each head's context values v_1..v_{T−1}, in float64: (..., T, dh) →
    (..., min(T − 1, dh)). The theorem's switch ⇒ sink needs the context values linearly independent (then
    `Σ_{j≥1} A[t,j] v_j = 0` forces every context weight to 0): all T − 1 of them above the rank tolerance, which
    needs T − 1 ≤ dh (docs/theory/geometry.md, The hard switch)."""
    return torch.linalg.svdvals(values[..., 1:, :].double())


def numerical_rank(spectrum: Tensor, rtol: float) -> Tensor:
    """The number of singular values above `rtol` × the largest (0 where all vanish): (..., k) → (...) int64."""
    return (spectrum > rtol * spectrum[..., :1]).sum(-1) * (spectrum[..., 0] > 0)

