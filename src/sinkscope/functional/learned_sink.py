"""Learned-sink statistics as pure functions (models whose attention has a learned sink column, gpt-oss's `s_aux`).

For query t of a head, `m_t` is the softmax mass on the head's learned sink logit, the column that takes mass and
contributes nothing to the output: the rows of the map A over the real keys sum to `1 − m_t`. Gu et al. 2025's
importance score and per-window rate carry over with `m_t` in place of `A[t,0]`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sinkscope.functional.switch import switched_off


def learned_sink_score(mass: Tensor) -> Tensor:
    """`mean_{t=0..T-1} m_t` (as the BOS sink score, t = 0 included). (..., T) → (...)."""
    return mass.mean(-1)


def hard_learned_sink_frac(mass: Tensor, delta: float = 0.1) -> Tensor:
    """Fraction of queries t ≥ 1 with `m_t ≥ 1-δ`. (..., T) → (...)."""
    return (mass[..., 1:] >= 1 - delta).to(mass.dtype).mean(-1)


def learned_sink_block_sums(
    mass: Tensor,
    out_norms: Tensor,
    value_norms: Tensor,
    hard_sink: Tensor,
    hard_diag: Tensor,
    q_start: int,
    delta: float,
    tau: float,
) -> tuple[dict[str, Tensor], Tensor]:
    """Streaming sums over one block of queries `q_start..q_start+Q-1`.

    `mass` (B, H, Q): `m_t`; `out_norms` (B, H, Q): `||o_t||`; `value_norms` (B, H, T): `||v_j||` of the window's
    keys; `hard_sink`, `hard_diag` (B, H, Q): `A[t,0] ≥ 1-δ`, `A[t,t] ≥ 1-δ` (false at t = 0).
    Returns per-head (H,) sums — `mass` (Σ m_t over all t), and over queries t ≥ 1: `hard` (m_t ≥ 1-δ), `n_off`
    (switched off, SPEC §3: `||o_t|| ≤ τ mean_{j≤t} ||v_j||`), `n_off_learned` (switched off and a hard learned
    sink), `n_off_any_sink` (switched off and a hard sink on BOS or on the learned sink) — and the (B,) count of
    queries t ≥ 1 at which every head is a hard sink, a hard learned sink or a hard diagonal.
    """
    Q = mass.shape[-1]
    valid = (torch.arange(q_start, q_start + Q, device=mass.device) >= 1).view(1, 1, Q)
    hard = (mass >= 1 - delta) & valid
    off = switched_off(out_norms, value_norms, tau, q_start) & valid
    count = lambda mask: mask.sum((0, 2)).double()  # noqa: E731
    sums = {
        "mass": mass.double().sum((0, 2)),
        "hard": count(hard),
        "n_off": count(off),
        "n_off_learned": count(off & hard),
        "n_off_any_sink": count(off & (hard | hard_sink)),
    }
    silent = ((hard | hard_sink | hard_diag).all(dim=1) & valid[0]).sum(-1).double()  # (B,)
    return sums, silent
