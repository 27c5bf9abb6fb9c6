"""What only the gBB lab measures (SPEC §7): losses against the oracle, copy accuracy and attention, logit
margins, the switch with output gates, W_QK norms.

Pure functions over tensors of one evaluation batch; no model, no I/O. Model positions follow `GBBBatch`:
position 0 is BOS when the task has one (otherwise the first real token, reported under the same name).
"Non-trigger queries" are `GBBBatch.is_plain`, which never contains model position 0 (it can only attend to
itself). The SPEC §2–§4 statistics (masses, row entropy, value drain, BOS norm ratio) are `sinkscope.functional`'s,
given the query set as a query mask (`evaluation.evaluate`).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from sinkscope.functional.query_mask import masked_query_mean
from sinkscope.functional.switch import switched_off
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


def copy_attention(probs: torch.Tensor, batch: GBBBatch) -> torch.Tensor:
    """Per-head mean (H,) of `A[t, t-k]` over copy queries (triggers with a source, SPEC §7); probs (B, H, T, T)."""
    b, h, t, _ = probs.shape
    key = batch.copy_key.clamp_min(0).view(b, 1, t, 1).expand(b, h, t, 1)
    return masked_query_mean(probs.gather(-1, key).squeeze(-1), batch.is_copy)  # A[t, source of t]: (B, H, T)


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


SWITCH_TAU = 0.1  # SPEC §3: a query is switched off when ||o_t|| ≤ τ · mean_{j≤t} ||v_j||


def switch_off_frac(
    probs: torch.Tensor, values: torch.Tensor, gates: torch.Tensor | None, mask: torch.Tensor, tau: float = SWITCH_TAU
) -> torch.Tensor:
    """Fraction (H,) of masked queries that the head switches off (SPEC §3 hard switch).

    `o_t = g_t ⊙ Σ_j A[t,j] v_j` is the head output before the output projection (gate `g_t` = 1 without
    gating); the query is off when `||o_t|| ≤ τ · mean_{j≤t} ||v_j||` (mean over the keys query t sees).
    probs (B, H, T, T), values (B, H, T, dh), gates (B, H, T) or (B, H, T, dh) or None, mask (B, T).
    """
    out = probs @ values  # (B, H, T, dh)
    if gates is not None:  # one gate per head (B, H, T) or per channel (B, H, T, dh)
        out = out * (gates if gates.dim() == 4 else gates.unsqueeze(-1))
    off = switched_off(out.norm(dim=-1), values.norm(dim=-1), tau)  # (B, H, T)
    return masked_query_mean(off.double(), mask)


def qk_norms(w_qk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Nuclear and Frobenius norms (H,) of per-head W_QK (H, d, d) (SPEC §6 costs)."""
    return torch.linalg.matrix_norm(w_qk, "nuc"), torch.linalg.matrix_norm(w_qk, "fro")
