"""Attention with a learned sink (gpt-oss's `s_aux`): one more softmax column per head, which takes mass and adds
nothing to the output.

For query t of head h, `[A[t,0], …, A[t,t], m_t] = softmax([S[t,0], …, S[t,t], σ_h])` with logits `S[t,j] = s q_t·k_j`
and `σ_h` the head's learned sink logit; the output is `o_t = Σ_j A[t,j] v_j` (the sink column has no value), so
the rows of A sum to `1 − m_t`. This is what the model's own eager attention computes; it returns A without the
sink column. `learned_sink_attention` computes it in query blocks, like `capture.blocks.blocked_attention`, and
hands each block and its sink column `m` to the caller.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

LearnedSinkObserver = Callable[[int, Tensor, Tensor, Tensor, Tensor], None]
"""`observer(q_start, probs (B,H,Q,K), entropy (B,H,Q) nats, out (B,H,Q,Dv), sink_mass (B,H,Q))` per block."""


def learned_sink_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float,
    sinks: Tensor,
    rows_per_block: int,
    on_block: LearnedSinkObserver,
) -> Tensor:
    """Causal softmax attention with a learned sink column, in query blocks; returns the output (B, T, H, Dv).

    `query` (B, H, T, D), `key`/`value` (B, KV, T, ·) (GQA: query head h reads kv head `h // (H // KV)`); `sinks`
    (H,): the sink logits σ_h; `attention_mask`: None (plain causal), boolean (True = attend) or additive float,
    broadcastable to (B, 1, T, T). Each block of `rows_per_block` queries is handed to `on_block` with `probs` = A
    over the real keys (rows sum to `1 − m_t`), the entropy `−Σ_j A[t,j] log A[t,j]` of those rows as they are
    (the sink column left out, as in the eager map), the head outputs and the sink mass `m_t`.
    """
    B, H, T, D = query.shape
    KV, Dv = key.shape[1], value.shape[-1]
    group = H // KV
    out = torch.empty(B, T, H, Dv, dtype=query.dtype, device=query.device)
    keys, values = key.float(), value.float()
    sink_logits = sinks.float().view(1, H, 1, 1)
    floor = torch.finfo(torch.float32).min
    for start in range(0, T, rows_per_block):
        stop = min(T, start + rows_per_block)
        Q = stop - start
        q = (query[:, :, start:stop].float() * scaling).reshape(B, KV, group * Q, D)  # heads of a group side by side
        logits = torch.matmul(q, keys[:, :, :stop].transpose(-1, -2)).view(B, H, Q, stop)
        if attention_mask is None:
            above = torch.ones(Q, Q, dtype=torch.bool, device=query.device).triu(1)
            logits[..., start:stop].masked_fill_(above, floor)
        elif attention_mask.dtype == torch.bool:
            logits.masked_fill_(~attention_mask[:, :, start:stop, :stop], floor)
        else:
            logits.add_(attention_mask[:, :, start:stop, :stop]).clamp_(min=floor)
        combined = torch.cat([logits, sink_logits.expand(B, H, Q, 1)], dim=-1)  # (B, H, Q, stop + 1)
        full = torch.softmax(combined, dim=-1)
        probs, mass = full[..., :stop], full[..., stop]
        entropy = -torch.where(probs > 0, probs * probs.clamp_min(1e-30).log(), torch.zeros_like(probs)).sum(-1)
        block = torch.matmul(probs.reshape(B, KV, group * Q, stop), values[:, :, :stop]).view(B, H, Q, Dv)
        on_block(start, probs, entropy, block, mass)
        out[:, start:stop] = block.transpose(1, 2).to(out.dtype)
    return out
