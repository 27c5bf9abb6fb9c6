"""Attention in query blocks: the block budget, the block path and the rows path (`capture.attention` routes).

Both paths take the queries in blocks of whole rows, each block's logits about `block_elements` numbers, over the
keys up to the block's last query, so no more than one block of one layer's attention exists at a time:
`blocked_attention` hands each softmaxed block to an observer, `row_attention` reduces it to the layer's
`AttentionReadout` (three entries per row, column sums, entropy) and drops it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from sinkscope.capture.readout import AttentionReadout
from sinkscope.functional.patterns import entropy_weights

# Elements of one (B, H, Q, K) block of logits on the CPU (4 MB in float32): small enough to stay near the cache,
# large enough for the q·kᵀ product to run at matrix speed.
BLOCK_ELEMENTS = 1 << 20
# On an accelerator a block should fill the device: 256 MB of float32 logits (and as much again for their
# softmax) keeps a block to tens of kernel launches per layer instead of one query row per block, and stays
# well inside the 2× of the forward pass's own activation memory at the lengths analysed.
DEVICE_BLOCK_ELEMENTS = 1 << 26
# The CPU's rows path takes at least this many queries per block where the element budget gives fewer (long T):
# a group's logits product then has 3·56 rows, enough for BLAS to run at speed (SmolLM2's shapes, 1 thread: 1.58×
# sdpa at T = 4096 against 1.64× with the budget's 28 rows, 1.78× at 8192 against 2.02× with 14;
# `benchmarks/attention_parts.py`, docs/performance.md), within 4× the budget and a quarter of the window.
MIN_ROWS_PER_BLOCK = 56


def block_elements(device: torch.device) -> int:
    """The block budget of `device`: `BLOCK_ELEMENTS` on the CPU, `DEVICE_BLOCK_ELEMENTS` elsewhere."""
    return BLOCK_ELEMENTS if device.type == "cpu" else DEVICE_BLOCK_ELEMENTS


def block_rows(batch: int, heads: int, seq_len: int, elements: int = BLOCK_ELEMENTS) -> int:
    """Queries per block so that one block of logits holds about `elements` numbers (at least one row)."""
    return max(1, min(seq_len, elements // max(1, batch * heads * seq_len)))


def blocked_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float,
    softcap: float | None,
    on_block: Callable[[int, Tensor, Tensor, Tensor], None],
) -> Tensor:
    """Causal softmax attention in query blocks; returns the output (B, T, H, Dv) like transformers does.

    `query` (B, H, T, D), `key`/`value` (B, KV, T, D): query head h reads kv head `h // (H // KV)` (GQA) without
    copying keys. `attention_mask`: None (plain causal), boolean (True = attend) or additive float, broadcastable
    to (B, 1, T, T). `on_block(q_start, probs, entropy, out)` sees each block; `entropy` is the row entropy in
    nats computed from the shifted logits (`H = log Z - Σ p s'`), which saves a logarithm over the block.
    """
    B, H, T, D = query.shape
    KV, Dv = key.shape[1], value.shape[-1]
    group = H // KV
    out = torch.empty(B, T, H, Dv, dtype=query.dtype, device=query.device)
    step = block_rows(B, H, T, block_elements(query.device))
    floor = torch.finfo(torch.float32).min
    keys, values = key.float(), value.float()  # once per layer, not per block
    for start in range(0, T, step):
        stop = min(T, start + step)
        Q = stop - start
        q = query[:, :, start:stop].float().reshape(B, KV, group * Q, D)  # heads of a group side by side
        k = keys[:, :, :stop]  # keys after the last query are causally masked: skip them
        logits = torch.matmul(q, k.transpose(-1, -2)).mul_(scaling).view(B, H, Q, stop)
        if softcap is not None:
            logits = torch.tanh(logits / softcap).mul_(softcap)
        # Keys before `start` are visible to every query of the block; only the block's own corner needs the mask.
        if attention_mask is None:
            corner = logits[..., start:stop]
            corner.masked_fill_(torch.ones(Q, Q, dtype=torch.bool, device=query.device).triu(1), floor)
        elif attention_mask.dtype == torch.bool:
            logits.masked_fill_(~attention_mask[:, :, start:stop, :stop], floor)
        else:
            logits.add_(attention_mask[:, :, start:stop, :stop]).clamp_(min=floor)
        logits.sub_(logits.amax(-1, keepdim=True))  # shifted logits s' ≤ 0
        probs = logits.exp()
        total = probs.sum(-1, keepdim=True)
        probs.div_(total)
        # Row entropy H = log Z - Σ_j p_j s'_j (masked s' is the float32 floor, where p = 0 adds nothing).
        entropy = total.squeeze(-1).log() - torch.einsum("...k,...k->...", probs, logits)
        block = torch.matmul(probs.view(B, KV, group * Q, stop), values[:, :, :stop])
        block = block.view(B, H, Q, Dv)
        on_block(start, probs, entropy, block)
        out[:, start:stop] = block.transpose(1, 2).to(out.dtype)
    return out


def row_block_rows(batch: int, heads: int, seq_len: int, device: torch.device) -> int:
    """Queries per block of the rows path: `block_rows` of the device's budget, and on the CPU at least
    `min(MIN_ROWS_PER_BLOCK, T // 4, block_rows of 4× the budget)`."""
    budget = block_elements(device)
    rows = block_rows(batch, heads, seq_len, budget)
    if device.type != "cpu":
        return rows
    return max(rows, min(MIN_ROWS_PER_BLOCK, seq_len // 4, block_rows(batch, heads, seq_len, 4 * budget)))


def host_reads_are_cheap(device: torch.device) -> bool:
    """Whether reading a value of `device` on the host costs nothing (the CPU) or stalls the device (the rest)."""
    return device.type == "cpu"


def row_attention(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, AttentionReadout]:
    """Plain causal attention and its `AttentionReadout` from query blocks of whole rows; the output is (B, T, H, Dv).

    `query` (B, H, T, D), `key`/`value` (B, KV, T, ·) (GQA: query head h reads kv head `h // (H // KV)`). Per
    block of queries, over the keys up to its last query: logits `S[t,j] = s q_t·k_j`, `P = softmax(S)` (the
    block's upper-right corner masked), output `P·V`; then `A[t,0]`, `A[t,t]`, `A[t,t−1]` are entries of P, the
    column sums gather `c_k += Σ_t P[t,k]`, and the entropy is `H_t = lse_t − Σ_j P[t,j] S[t,j]` with
    `lse_t = S[t,j] − log P[t,j]`, exact for any j with `P[t,j] > 0`; j is whichever of 0 and t has the larger
    probability (its logarithm is then well conditioned), and a block where both are below `1e-30` in some row
    takes `lse = logsumexp(S)` instead. Off the CPU every block takes `logsumexp` (an extra pass over a block in
    device memory costs less than reading a flag on the host, which would stall the device once per block).
    """
    B, H, T, D = query.shape
    KV, Dv = key.shape[1], value.shape[-1]
    group = H // KV
    keys, values = key.float(), value.float()
    out = torch.empty(B, T, H, Dv, dtype=query.dtype, device=query.device)
    f32 = dict(dtype=torch.float32, device=query.device)
    sink, diag, prev, norms = (torch.zeros(B, H, T, **f32) for _ in range(4))
    columns = torch.zeros(B, H, T, dtype=torch.float64, device=query.device)
    entropy = torch.zeros(B, H, dtype=torch.float64, device=query.device)
    weights = entropy_weights(0, T, query.device)
    floor = torch.finfo(torch.float32).min  # not −inf: P·S must stay 0 (not NaN) where P = 0
    step = row_block_rows(B, H, T, query.device)
    host_reads_cheap = host_reads_are_cheap(query.device)
    above = torch.ones(step, step, dtype=torch.bool, device=query.device).triu(1)  # the corner's masked part
    for start in range(0, T, step):
        stop = min(T, start + step)
        Q = stop - start
        # Heads of a group side by side; the scale goes on q (Q·D products instead of Q·stop).
        q = (query[:, :, start:stop].float() * scaling).reshape(B, KV, group * Q, D)
        logits = torch.matmul(q, keys[:, :, :stop].transpose(-1, -2)).view(B, H, Q, stop)
        corner = logits[..., start:stop]
        corner.masked_fill_(above[:Q, :Q], floor)
        probs = torch.softmax(logits, -1)
        block = torch.matmul(probs.view(B, KV, group * Q, stop), values[:, :, :stop]).view(B, H, Q, Dv)
        p_sink, p_diag = probs[..., 0], probs[..., start:stop].diagonal(dim1=-2, dim2=-1)
        sink[..., start:stop], diag[..., start:stop] = p_sink, p_diag
        lower = probs[..., max(start - 1, 0) : stop].diagonal(offset=-1 if start == 0 else 0, dim1=-2, dim2=-1)
        prev[..., max(start, 1) : stop] = lower
        columns[..., :stop] += probs.sum(-2)
        use_sink = p_sink >= p_diag
        best = torch.where(use_sink, p_sink, p_diag)
        if not host_reads_cheap or bool((best < 1e-30).any()):
            lse = torch.logsumexp(logits, -1)
        else:
            best_logit = torch.where(use_sink, logits[..., 0], corner.diagonal(dim1=-2, dim2=-1))
            lse = best_logit - best.log()
        row_entropy = lse.double() - torch.linalg.vecdot(probs, logits).double()
        entropy += (row_entropy * weights[start:stop]).sum(-1)
        norms[..., start:stop] = block.norm(dim=-1)
        out[:, start:stop] = block.transpose(1, 2).to(out.dtype)
    return out, AttentionReadout(sink=sink, diag=diag, prev=prev, columns=columns, entropy=entropy, out_norms=norms)
