"""What the gBB lab measures (SPEC §7, with the statistics of §2–§4 restricted to the task's query sets).

Pure functions over tensors of one evaluation batch; no model, no I/O. Model positions follow `GBBBatch`:
position 0 is BOS when the task has one (otherwise the first real token, reported under the same name).
"Non-trigger queries" are `GBBBatch.is_plain`, which never contains model position 0 (it can only attend to
itself). The SPEC §2–§3 definitions come from `sinkscope.stats` (row entropy, value drain), applied to these
query sets.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from sinkscope.stats import patterns, switch
from sinkscope.synthetic.bigram_backcopy import GBBBatch

_TINY = 1e-30


def excess_loss(logits: torch.Tensor, oracle: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over masked positions of KL(oracle ‖ model) in nats = expected loss minus the Bayes optimum.

    logits (B, T, V), oracle (B, T, V) probabilities, mask (B, T) bool.
    """
    logq = F.log_softmax(logits.double(), dim=-1)
    kl = (oracle * (oracle.clamp_min(_TINY).log() - logq)).sum(-1)  # (B, T); 0·log 0 = 0
    return float(kl[mask].mean())


def bayes_loss(oracle: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean entropy (nats) of the oracle over masked positions: the best achievable expected loss."""
    ent = -(oracle * oracle.clamp_min(_TINY).log()).sum(-1)
    return float(ent[mask].mean())


def copy_accuracy(logits: torch.Tensor, batch: GBBBatch) -> float:
    """Fraction of copy queries (trigger with a source, SPEC §7) whose argmax prediction is `s_{t-k}`."""
    source = batch.inputs.gather(1, batch.copy_key.clamp_min(0))  # (B, T)
    hit = logits.argmax(-1) == source
    return float(hit[batch.is_copy].double().mean())


def pattern_masses(probs: torch.Tensor, batch: GBBBatch) -> dict[str, torch.Tensor]:
    """Per-head attention masses (H,) of one layer, probs (B, H, T, T).

    `bos_attn`: mean A[t, 0] over non-trigger queries; `diag_attn`: mean A[t, t] over non-trigger queries;
    `prev_attn`: mean A[t, t-k] over non-trigger queries with t-k ≥ 0 (the copy pattern where no copy is due);
    `copy_attn`: mean A[t, t-k] over copy queries (triggers with a source).
    """
    b, h, t, _ = probs.shape
    first = probs[..., 0]  # (B, H, T)
    diag = probs.diagonal(dim1=-2, dim2=-1)  # (B, H, T)
    key = batch.copy_key.clamp_min(0).view(b, 1, t, 1).expand(b, h, t, 1)
    to_source = probs.gather(-1, key).squeeze(-1)  # (B, H, T)
    k = batch.copy_offset
    offset = torch.zeros_like(diag)
    offset[..., k:] = probs.diagonal(offset=-k, dim1=-2, dim2=-1)  # A[t, t-k] for t ≥ k
    has_offset = batch.is_plain & (torch.arange(t) >= k)

    def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1)[:, mask].mean(-1)  # (B, H, T) with mask (B, T) -> (H,)

    return {
        "bos_attn": masked_mean(first, batch.is_plain),
        "diag_attn": masked_mean(diag, batch.is_plain),
        "prev_attn": masked_mean(offset, has_offset),
        "copy_attn": masked_mean(to_source, batch.is_copy),
    }


def row_entropy(probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SPEC §2 entropy per head (H,): mean over masked queries t ≥ 1 of `H(A[t, :t+1]) / log(t+1)`.

    probs (B, H, T, T), mask (B, T). Rows that do not sum to 1 (sink logit, ReLU) are renormalised first;
    0 = one-hot, 1 = uniform over the visible keys (`sinkscope.stats.patterns.row_entropy` on the kept rows).
    """
    p = probs / probs.sum(-1, keepdim=True).clamp_min(_TINY)
    ent = patterns.row_entropy(p)  # (B, H, T-1): queries t = 1..T-1
    return ent.transpose(0, 1)[:, mask[:, 1:]].mean(-1)


def pattern_margins(probs: torch.Tensor, batch: GBBBatch) -> dict[str, torch.Tensor]:
    """Median observed margins κ (H,) over non-trigger queries t ≥ 1, from softmax weights (B, H, T, T).

    `sink_margin` = median of `l_t0 - max_{1≤j≤t} l_tj`; `diag_margin` = median of `l_tt - max_{j<t} l_tj`
    (logit differences = log-weight differences for softmax; meaningless for ReLU attention).
    """
    t = probs.shape[-1]
    logp = probs.clamp_min(_TINY).log()
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    neg = torch.finfo(logp.dtype).min
    others_sink = logp.masked_fill(~causal, neg)[..., 1:].amax(-1)  # (B, H, T); empty for t=0, masked below
    sink = logp[..., 0] - others_sink
    off_diag = causal & ~torch.eye(t, dtype=torch.bool)
    diag = logp.diagonal(dim1=-2, dim2=-1) - logp.masked_fill(~off_diag, neg).amax(-1)
    plain = batch.is_plain  # (B, T); x.transpose(0, 1)[:, plain] is (H, n_queries)
    return {
        "sink_margin": sink.transpose(0, 1)[:, plain].median(-1).values,
        "diag_margin": diag.transpose(0, 1)[:, plain].median(-1).values,
    }


def value_drain(values: torch.Tensor) -> torch.Tensor:
    """SPEC §3 value drain `||v_0|| / mean_{j≥1} ||v_j||` per head (H,), averaged over windows; values (B, H, T, dh)."""
    return switch.value_drain(values.norm(dim=-1)).mean(0)


SWITCH_TAU = 0.1  # SPEC §3: a query is switched off when ||o_t|| ≤ τ · mean_j ||v_j||


def switch_off_frac(
    probs: torch.Tensor, values: torch.Tensor, gates: torch.Tensor | None, mask: torch.Tensor, tau: float = SWITCH_TAU
) -> torch.Tensor:
    """Fraction (H,) of masked queries that the head switches off (SPEC §3 hard switch).

    `o_t = g_t Σ_j A[t,j] v_j` is the head output before the output projection (gate `g_t` = 1 without
    gating); the query is off when `||o_t|| ≤ τ · mean_j ||v_j||` (mean over the window's positions).
    probs (B, H, T, T), values (B, H, T, dh), gates (B, H, T) or None, mask (B, T).
    """
    out = probs @ values  # (B, H, T, dh)
    if gates is not None:
        out = out * gates.unsqueeze(-1)
    value_norms = values.norm(dim=-1)  # (B, H, T)
    off = out.norm(dim=-1) <= tau * value_norms.mean(-1, keepdim=True)
    return off.double().transpose(0, 1)[:, mask].mean(-1)


def first_token_norm(resid: torch.Tensor) -> tuple[float, float]:
    """Residual norm of position 0 and its ratio to `mean_{t≥1} ||h_t||` (SPEC §4); resid (B, T, d)."""
    norms = resid.norm(dim=-1)  # (B, T)
    return float(norms[:, 0].mean()), float((norms[:, 0] / norms[:, 1:].mean(-1)).mean())


def qk_norms(w_qk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Nuclear and Frobenius norms (H,) of per-head W_QK (H, d, d) (SPEC §6 costs)."""
    return torch.linalg.matrix_norm(w_qk, "nuc"), torch.linalg.matrix_norm(w_qk, "fro")
