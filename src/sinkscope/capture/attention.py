"""Attention computed in query blocks, with statistics reduced as each block is produced.

Registered with transformers' attention interface as "sinkscope" (together with a mask function: a custom
attention function registered without one gets no causal mask, and would silently give wrong sink scores).
For each block of queries we form the logits from q and k, softmax them, hand the probabilities to the
observer, and multiply by v for the layer's output, so no more than one block of one layer's attention
exists at a time, whatever T is, and attention is computed once (the model's output is ours, equal to eager).
Modules that no observer watches fall through to the plain sdpa path.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch import Tensor

from sinkscope.errors import SinkscopeError

NAME = "sinkscope"
# Elements of one (B, H, Q, K) block of logits (4 MB in float32): small enough to stay near the cache, large
# enough for the q·kᵀ product to run at matrix speed.
BLOCK_ELEMENTS = 1 << 20

BlockObserver = Callable[[int, int, Tensor, Tensor, Tensor], None]
"""`observer(layer, q_start, probs (B,H,Q,K), entropy (B,H,Q) nats, out (B,H,Q,Dv))` for every block."""

_watched: dict[int, tuple[int, BlockObserver, Callable[[int, Tensor], None]]] = {}


def block_rows(batch: int, heads: int, seq_len: int) -> int:
    """Queries per block so that one block of logits holds about `BLOCK_ELEMENTS` numbers."""
    return max(1, min(seq_len, BLOCK_ELEMENTS // max(1, batch * heads * seq_len)))


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
    step = block_rows(B, H, T)
    floor = torch.finfo(torch.float32).min
    for start in range(0, T, step):
        stop = min(T, start + step)
        Q = stop - start
        q = query[:, :, start:stop].float().reshape(B, KV, group * Q, D)  # heads of a group side by side
        k = key[:, :, :stop].float()  # keys after the last query are causally masked: skip them
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
        block = torch.matmul(probs.view(B, KV, group * Q, stop), value[:, :, :stop].float())
        block = block.view(B, H, Q, Dv)
        on_block(start, probs, entropy, block)
        out[:, start:stop] = block.transpose(1, 2).to(out.dtype)
    return out


def sinkscope_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers attention-interface function: blocked attention for watched modules, sdpa otherwise."""
    watch = _watched.get(id(module))
    if watch is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if kwargs.get("s_aux") is not None:
        raise SinkscopeError("models with learned attention sinks (s_aux) are not supported yet")
    layer, observer, on_values = watch
    on_values(layer, value)
    out = blocked_attention(
        query,
        key,
        value,
        attention_mask,
        query.shape[-1] ** -0.5 if scaling is None else scaling,
        softcap,
        lambda start, probs, entropy, block: observer(layer, start, probs, entropy, block),
    )
    return out, None


def register() -> None:
    """Register "sinkscope" as an attention function and its (sdpa-style) mask function; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, sinkscope_attention)
    # sdpa_mask returns None for plain causal attention (we then mask causally per block) and a boolean
    # (B, 1, T, T) mask when padding or a sliding window needs one.
    AttentionMaskInterface.register(NAME, sdpa_mask)


@contextmanager
def watch_attention(
    model: torch.nn.Module,
    modules: dict[int, torch.nn.Module],
    observer: BlockObserver,
    on_values: Callable[[int, Tensor], None],
):
    """Route the attention of `modules` ({layer: attention module}) through `blocked_attention` inside the block.

    Sets the model's attention implementation to "sinkscope" and restores the previous one in `finally`.
    """
    register()
    config = model.config
    previous = config._attn_implementation
    for layer, module in modules.items():
        _watched[id(module)] = (layer, observer, on_values)
    try:
        model.set_attn_implementation(NAME)
        yield
    finally:
        for module in modules.values():
            _watched.pop(id(module), None)
        model.set_attn_implementation(previous)
