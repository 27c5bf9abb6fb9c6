"""Attention-pattern statistics of SPEC §2, as pure functions over attention tensors.

Two forms of each statistic:
- direct functions over whole causal maps `attn[..., T, T]` (rows = queries t, columns = keys j), for users
  holding their own maps and as the readable definition;
- `pattern_block_sums`, the streaming form: sums over a block of query rows `[q_start, q_start+Q)` of a batch,
  which the capture adds up across blocks, layers' heads and windows (STYLE practice 7).
Positions are 0-indexed; key 0 is the sink candidate (BOS). The direct scores take an optional query mask
(B, T) or (T,) (e.g. the gBB lab's non-trigger queries): they then average over the masked queries of every
window, pooled over the windows (`sinkscope.functional.query_mask`), so (B, ..., T, T) → (...).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from sinkscope.functional.head_classes import HeadThresholds, classify_head
from sinkscope.functional.query_mask import masked_query_mean


def sink_score(attn: Tensor, query_mask: Tensor | None = None) -> Tensor:
    """Gu et al. 2025 importance of key 0: `α = mean_{t=0..T-1} A[t,0]` (SPEC §2). (..., T, T) → (...).
    With `query_mask` the mean runs over the masked queries t (module doc)."""
    return _query_mean(attn[..., :, 0], query_mask)


def _query_mean(per_query: Tensor, query_mask: Tensor | None, first: int = 0) -> Tensor:
    """Mean of `per_query` (..., T - first), the values of queries `first..T-1`, over those queries, or over
    the masked ones of them (`query_mask` (B, T) or (T,), pooled over windows)."""
    if query_mask is None:
        return per_query.mean(-1)
    return masked_query_mean(per_query, query_mask[..., first:])


def key_scores(attn: Tensor) -> Tensor:
    """Per-position sink score `α_k = mean_{t≥k} A[t,k]` for every key k (SPEC §2). (..., T, T) → (..., T)."""
    return key_scores_from_columns(attn.sum(-2))


def key_scores_from_columns(columns: Tensor) -> Tensor:
    """`α_k = Σ_{t≥k} A[t,k] / (T-k)` from one window's column sums `Σ_t A[t,k]` (causal: rows t < k add 0).
    (..., T) → (..., T)."""
    return columns / count_down(columns.shape[-1], columns.dtype, str(columns.device))


@functools.lru_cache(maxsize=64)
def count_down(n: int, dtype: torch.dtype, device: str) -> Tensor:
    """`[n, n−1, …, 1]` (the number of queries t ≥ k that see key k when n = T), made once per n, dtype and device:
    a fresh `arange` per batch would be one more kernel launch on an accelerator."""
    return torch.arange(n, 0, -1, dtype=dtype, device=device)


@functools.lru_cache(maxsize=64)
def later_queries(q_start: int, Q: int, device: str) -> Tensor:
    """`[t ≥ 1]` for the queries t = q_start..q_start+Q-1 (SPEC §2–§3 average over t ≥ 1), (Q,) bool, made once
    per block shape and device."""
    return torch.arange(q_start, q_start + Q, device=device) >= 1


@functools.lru_cache(maxsize=64)
def _entry_weights(q_start: int, Q: int, dims: int, device: str) -> Tensor:
    """Weights of the sums of `A[t,0]` (every t), `A[t,t]` and `A[t,t−1]` (t ≥ 1) over queries q_start..q_start+Q-1,
    (3, 1, …, 1, Q) with `dims` dimensions, float64."""
    valid = later_queries(q_start, Q, device).double()
    return torch.stack([torch.ones_like(valid), valid, valid]).view(3, *([1] * (dims - 2)), Q)


def received_scores(attn: Tensor) -> Tensor:
    """Attention a key receives from later queries, `received_k = mean_{t=k+1..T-1} A[t,k]` for 1 ≤ k ≤ T-2
    (SPEC §2 key-token table; BOS and self-attention excluded). (..., T, T) → (..., T-2)."""
    return received_from_columns(attn.sum(-2), attn.diagonal(dim1=-2, dim2=-1))


def received_from_columns(columns: Tensor, diagonal: Tensor) -> Tensor:
    """`received_k` of `received_scores` from one window's column sums and diagonal `A[k,k]`, both (..., T):
    `(Σ_t A[t,k] - A[k,k]) / (T-1-k)` for k = 1..T-2. → (..., T-2)."""
    T = columns.shape[-1]
    later = (columns - diagonal)[..., 1 : T - 1]
    return later / count_down(T - 2, columns.dtype, str(columns.device))


def exceed_counts(scores: Tensor, epsilons: Tensor, dim: int = 0) -> Tensor:
    """How many windows have a score above each threshold: `Σ_w [scores[w] > ε_e]`, the numerator of Gu et al.'s
    per-window sink rate (SPEC §2). `scores` (W, ...) (windows on axis `dim`), `epsilons` (E,) → (E, ...) float64
    counts (the windows' axis summed out)."""
    above = scores > epsilons.view(-1, *([1] * scores.dim())).to(scores)  # (E, *scores.shape) by broadcasting
    return above.sum(dim + 1 if dim >= 0 else dim, dtype=torch.float64)


def diag_score(attn: Tensor, query_mask: Tensor | None = None) -> Tensor:
    """`mean_{t=1..T-1} A[t,t]` (SPEC §2), over the masked queries t ≥ 1 with `query_mask`. (..., T, T) → (...)."""
    return _query_mean(attn.diagonal(dim1=-2, dim2=-1)[..., 1:], query_mask, first=1)


def prev_score(attn: Tensor, query_mask: Tensor | None = None, offset: int = 1) -> Tensor:
    """Previous-token score `mean_{t=1..T-1} A[t,t-1]` (SPEC §2); with `offset` k the mass k tokens back,
    `mean_{t=k..T-1} A[t,t-k]` (the gBB copy offset), over the masked queries t ≥ k with `query_mask`.
    (..., T, T) → (...)."""
    return _query_mean(attn.diagonal(offset=-offset, dim1=-2, dim2=-1), query_mask, first=offset)


def row_entropy(attn: Tensor) -> Tensor:
    """Normalised row entropy `H(A[t,:t+1]) / log(t+1)` for t ≥ 1 (0 = one-hot, 1 = uniform). → (..., T-1)."""
    T = attn.shape[-1]
    plogp = torch.where(attn > 0, attn * attn.clamp_min(1e-30).log(), torch.zeros_like(attn))
    entropy = -plogp.sum(-1)[..., 1:]
    return entropy / torch.log(torch.arange(2, T + 1, dtype=attn.dtype, device=attn.device))


def entropy_score(attn: Tensor, query_mask: Tensor | None = None) -> Tensor:
    """Mean normalised row entropy over queries t ≥ 1 (SPEC §2), over the masked ones with `query_mask`.
    (..., T, T) → (...)."""
    return _query_mean(row_entropy(attn), query_mask, first=1)


def hard_sink_frac(attn: Tensor, delta: float = 0.1) -> Tensor:
    """Fraction of queries t ≥ 1 with `A[t,0] ≥ 1-δ` (SPEC §2). (..., T, T) → (...)."""
    return (attn[..., 1:, 0] >= 1 - delta).to(attn.dtype).mean(-1)


def hard_diag_frac(attn: Tensor, delta: float = 0.1) -> Tensor:
    """Fraction of queries t ≥ 1 with `A[t,t] ≥ 1-δ` (SPEC §2). (..., T, T) → (...)."""
    return (attn.diagonal(dim1=-2, dim2=-1)[..., 1:] >= 1 - delta).to(attn.dtype).mean(-1)


def sink_rate(scores: Tensor, epsilon: float = 0.3) -> float:
    """Fraction of all entries with sink score above ε (SPEC §2; Gu et al. use ε = 0.3). Given per-window scores
    `α^w_{l,h}` (W, L, H) this is Gu et al.'s sink rate; given scores averaged over windows it is
    `sink_rate_of_mean`, a different number."""
    return float((scores > epsilon).float().mean())


def pattern_block_sums(
    probs: Tensor, q_start: int, delta: float, entropy: Tensor | None = None
) -> tuple[dict[str, Tensor], Tensor, Tensor]:
    """Streaming sums of SPEC §2 over one block of query rows.

    `probs`: (B, H, Q, K) attention of queries `q_start..q_start+Q-1` over keys `0..K-1` (K ≥ q_start+Q; keys
    past the last query are causally masked, so a block may stop there). `entropy`: optional (B, H, Q) row
    entropies in nats already known to the caller (from the logits), else computed from `probs`.
    Returns `(sums, hard_sink, hard_diag)`: `sums[name]` of shape (H,) summed over batch and rows (queries
    t ≥ 1 only, except `sink` which includes t = 0 as SPEC §2 says), `sums["row_total"]` (H,) the total mass
    (must equal B·Q: rows sum to 1) and `sums["upper_mass"]` (H,) the mass above the diagonal (must be 0:
    causal); two per-window entries the caller completes across blocks before thresholding them per window:
    `sums["columns"]` (B, H, K) the block's column sums (for `α^w_k` and `received^w_k`) and `sums["diagonal"]`
    (B, H, Q) `A[t,t]` of the block's rows. `hard_sink`, `hard_diag` are (B, H, Q) booleans (false for t = 0),
    for the switch table and the layer's MLP-like fraction (SPEC §3).
    """
    B, H, Q, K = probs.shape
    rows = torch.arange(q_start, q_start + Q, device=probs.device)
    diag = probs.gather(-1, rows.view(1, 1, Q, 1).expand(B, H, Q, 1)).squeeze(-1)  # (B, H, Q)
    prev = probs.gather(-1, (rows - 1).clamp_min(0).view(1, 1, Q, 1).expand(B, H, Q, 1)).squeeze(-1)
    sums, hard_sink, hard_diag = pattern_row_sums(probs[..., 0], diag, prev, q_start, delta)
    if entropy is None:
        plogp = torch.where(probs > 0, probs * probs.clamp_min(1e-30).log(), torch.zeros_like(probs))
        entropy = -plogp.sum(-1)
    sums["entropy"] = (entropy.double() * entropy_weights(q_start, Q, probs.device)).sum((0, 2))
    # Mass above the diagonal can only sit in the block's own Q×Q corner (keys q_start..q_start+Q-1).
    corner = probs[..., q_start : q_start + Q]
    above = torch.ones(Q, Q, dtype=torch.bool, device=probs.device).triu(1)
    columns = probs.sum(2).double()  # (B, H, K): float32 within a block, float64 across blocks
    sums |= {
        "upper_mass": (corner * above).sum((0, 2, 3)).double(),
        "row_total": columns.sum((0, 2)),
        "columns": columns,
        "diagonal": diag.double(),
    }
    return sums, hard_sink, hard_diag


def entropy_weights(q_start: int, Q: int, device: torch.device | str = "cpu") -> Tensor:
    """Weights `w_t = 1 / log(t+1)` of query rows `q_start..q_start+Q-1` that normalise their entropy, and
    `w_0 = 0` (SPEC §2 averages over t ≥ 1). → (Q,) float64."""
    rows = torch.arange(q_start, q_start + Q, device=device, dtype=torch.float64)
    return torch.where(rows >= 1, 1 / torch.log((rows + 1).clamp_min(2)), torch.zeros_like(rows))


def pattern_row_sums(
    col0: Tensor, diag: Tensor, prev: Tensor, q_start: int, delta: float
) -> tuple[dict[str, Tensor], Tensor, Tensor]:
    """The SPEC §2 sums that need only three entries of each query row: `col0 = A[t,0]`, `diag = A[t,t]`,
    `prev = A[t,t-1]` (any value at t = 0), each (..., B, H, Q) for queries `q_start..q_start+Q-1` (leading
    dimensions, e.g. layers, are kept). Returns `(sums, hard_sink, hard_diag)` as `pattern_block_sums` does, with
    the sums `sink` (over every t), `diag`, `prev`, `hard_sink`, `hard_diag` (over t ≥ 1), each (..., H) float64."""
    Q = col0.shape[-1]
    entries = torch.stack([col0, diag, prev]).double()  # (3, ..., B, H, Q); all three at once: fewer launches
    hard = (entries[:2] >= 1 - delta) & later_queries(q_start, Q, str(col0.device))  # A[t,0], A[t,t] ≥ 1 − δ, t ≥ 1
    weights = _entry_weights(q_start, Q, entries.dim(), str(col0.device))  # A[t,0] at every t, the others at t ≥ 1
    sink, diag_sum, prev_sum = (entries * weights).sum((-3, -1)).unbind(0)
    hard_sink_sum, hard_diag_sum = hard.sum((-3, -1), dtype=torch.float64).unbind(0)
    sums = {"sink": sink, "diag": diag_sum, "prev": prev_sum, "hard_sink": hard_sink_sum, "hard_diag": hard_diag_sum}
    hard_sink, hard_diag = hard.unbind(0)
    return sums, hard_sink, hard_diag


def finalize_pattern_scores(sums: dict[str, Tensor], windows: int, seq_len: int) -> dict[str, Tensor]:
    """Turn accumulated sums over `windows` windows into the SPEC §2 means (per head)."""
    n_all, n_ctx = windows * seq_len, windows * (seq_len - 1)
    counts = torch.arange(seq_len, 0, -1, dtype=torch.float64) * windows  # rows t ≥ k for each key k
    return {
        "sink_score": sums["sink"] / n_all,
        "diag_score": sums["diag"] / n_ctx,
        "prev_score": sums["prev"] / n_ctx,
        "entropy": sums["entropy"] / n_ctx,
        "hard_sink_frac": sums["hard_sink"] / n_ctx,
        "hard_diag_frac": sums["hard_diag"] / n_ctx,
        "key_scores": sums["keys"] / counts,
    }


# analyze's head classes (SPEC §2); the classifier and its named thresholds live in `stats.head_classes`.
HEAD_CLASS_THRESHOLDS = {"diagonal": HeadThresholds.diagonal, "previous-token": HeadThresholds.previous,
                         "dense": HeadThresholds.dense}  # fmt: skip


def head_class(
    sink: float, diag: float, prev: float, entropy: float, epsilon: float = 0.3, learned_sink: float = 0.0,
    thresholds: HeadThresholds | None = None,
) -> str:
    """analyze's class of a head from its SPEC §2 scores: `classify_head` with `thresholds`, by default
    `HeadThresholds(sink=epsilon, learned_sink=epsilon)` (learned sink, sink, diagonal, previous-token, dense or
    mixed; `AnalyzeConfig.head_thresholds` sets the others); `learned_sink` is the head's learned-sink score
    (gpt-oss), 0 without one."""
    thresholds = thresholds or HeadThresholds(sink=epsilon, learned_sink=epsilon)
    return classify_head(sink, diag, prev, entropy, thresholds=thresholds, learned_sink=learned_sink)
