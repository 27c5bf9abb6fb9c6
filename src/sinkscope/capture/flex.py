"""The flex path: plain causal attention and its `LayerRows` from two `flex_attention` calls, the path CUDA takes.

Neither call forms the T×T map. With logits `S[t,j] = s q_t·k_j` (s the scale):

1. Causal attention of `q` over `k` with the values `[v_j, k_j − k̄]` (k̄ the window's mean key) and its row
   log-normaliser `lse_t = log Σ_{j≤t} exp S[t,j]`. The first `Dv` output columns are the layer's output
   `o_t = Σ_j A[t,j] v_j`; the others are `ō_t = Σ_j A[t,j] (k_j − k̄)`, so the row entropy is
   `H_t = lse_t − Σ_j A[t,j] S[t,j] = (lse_t − s q_t·k̄) − s q_t·ō_t`. Centring the keys keeps the two terms
   small where keys share a large common part (massive activations), so their difference loses no digits.
   Any entry costs O(d): `A[t,j] = exp(S[t,j] − lse_t)`, which gives `A[t,0]`, `A[t,t]`, `A[t,t−1]`.
2. The transposed attention: queries `k_k`, keys `q_t`, `score_mod` subtracting `lse_t`, mask `t ≥ k`; its
   log-normaliser is `log Σ_{t≥k} exp(S[t,k] − lse_t) = log c_k`, the column sums (its output is not used).

Both calls run in float32 (a float32 copy of q, k and v per layer, never of a block of the map), so every
statistic equals the float64 computation to about 1e-6 for bfloat16 models too. On CUDA each call is compiled by
`torch.compile` into one fused kernel; on the CPU flex_attention runs eagerly and materialises the scores, so the
CPU routes elsewhere (`capture.attention.attention_path`) and only tests call this path there.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from sinkscope.capture.layer_rows import LayerRows
from sinkscope.stats.patterns import entropy_weights

try:  # torch ≥ 2.5
    from torch.nn.attention import flex_attention as _flex_module
except ImportError:  # pragma: no cover - old torch: `available()` is False
    _flex_module = None

# torch.compile's backend for the CUDA kernels; tests trace the same functions with "aot_eager" on the CPU (the
# inductor CPU backend cannot return lse).
COMPILE_BACKEND = "inductor"
# The value head of the transposed call: its output is discarded, so it is as narrow as flex_attention allows.
_UNUSED_VALUE_DIM = 16


def available() -> bool:
    """Whether this torch has `flex_attention` (torch ≥ 2.5)."""
    return _flex_module is not None


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _anti_causal(b, h, q_idx, kv_idx):
    return kv_idx >= q_idx


@functools.cache
def _block_masks(seq_len: int, device: str) -> tuple[object, object]:
    """The causal mask of call 1 and the `t ≥ k` mask of call 2, as flex block masks (built once per T)."""
    build = _flex_module.create_block_mask
    return (build(_causal, None, None, seq_len, seq_len, device=device),
            build(_anti_causal, None, None, seq_len, seq_len, device=device))  # fmt: skip


def _flex_with_lse(query: Tensor, key: Tensor, value: Tensor, scale: float, block_mask, score_mod=None,
                   enable_gqa: bool = False) -> tuple[Tensor, Tensor]:  # fmt: skip
    """`flex_attention` returning (output, lse), through `AuxRequest` where this torch has it."""
    common = dict(score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa)
    aux_request = getattr(_flex_module, "AuxRequest", None)
    if aux_request is not None:
        out, aux = _flex_module.flex_attention(query, key, value, return_aux=aux_request(lse=True), **common)
        return out, aux.lse
    return _flex_module.flex_attention(query, key, value, return_lse=True, **common)


def _forward(query: Tensor, key: Tensor, value: Tensor, scale: float, block_mask) -> tuple[Tensor, Tensor]:
    """Call 1: causal attention (GQA) and its row log-normaliser."""
    return _flex_with_lse(query, key, value, scale, block_mask, enable_gqa=True)


def _log_column_sums(keys: Tensor, queries: Tensor, lse: Tensor, scale: float, block_mask) -> Tensor:
    """Call 2: `log c_k` (B, H, T) from keys (B, H, T, D) attending to queries with `S[t,k] − lse_t`."""

    def minus_row_lse(score, b, h, q_idx, kv_idx):
        return score - lse[b, h, kv_idx]

    unused = queries.new_zeros(*queries.shape[:-1], _UNUSED_VALUE_DIM)
    return _flex_with_lse(keys, queries, unused, scale, block_mask, score_mod=minus_row_lse)[1]


@functools.cache
def _kernels(device_type: str) -> tuple[Callable, Callable]:
    """The two calls, compiled into fused kernels on CUDA (once per process), eager elsewhere."""
    if device_type != "cuda":
        return _forward, _log_column_sums
    # A run sees one or two shapes (B, T) per layer call (its last batch may be smaller); a benchmark or a sweep
    # more. Automatic dynamic shapes compile once for the first shape and once more for all others; the limit is
    # raised so that dtypes and head layouts beyond the default 8 recompilations never fall back to eager flex
    # (which would form the whole T×T map).
    config = torch._dynamo.config
    config.recompile_limit = max(getattr(config, "recompile_limit", 8), 64)
    return (torch.compile(_forward, fullgraph=True, backend=COMPILE_BACKEND),
            torch.compile(_log_column_sums, fullgraph=True, backend=COMPILE_BACKEND))  # fmt: skip


def flex_rows(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, LayerRows]:
    """Plain causal attention and its `LayerRows` (module doc); the output is (B, T, H, Dv) like transformers'.

    `query` (B, H, T, D), `key`/`value` (B, KV, T, ·) (GQA: query head h reads kv head `h // (H // KV)`).
    """
    B, H, T, D = query.shape
    KV, Dv = key.shape[1], value.shape[-1]
    group = H // KV
    q, k = query.float(), key.float()
    k_mean = k.mean(2, keepdim=True)  # (B, KV, 1, D)
    causal, anti_causal = _block_masks(T, str(query.device))
    forward, log_column_sums = _kernels(query.device.type)
    mixed, lse = forward(q, k, torch.cat([value.float(), k - k_mean], -1), scaling, causal)
    log_columns = log_column_sums(k.repeat_interleave(group, 1), q, lse, scaling, anti_causal)
    out, k_mix = mixed[..., :Dv], mixed[..., Dv:]

    q_groups = q.view(B, KV, group, T, D)

    def logits(keys: Tensor) -> Tensor:  # s q_t·keys_t per query head, keys (B, KV, T or 1, D) → (B, H, T)
        return (scaling * (q_groups * keys.unsqueeze(2)).sum(-1)).view(B, H, -1)

    def entries(keys: Tensor, rows: slice = slice(None)) -> Tensor:  # A[t, j(t)] = exp(S[t, j(t)] − lse_t)
        return torch.exp(logits(keys) - lse[..., rows])

    prev = torch.zeros_like(lse)
    prev[..., 1:] = torch.exp((scaling * (q_groups[..., 1:, :] * k[:, :, None, :-1]).sum(-1)).view(B, H, T - 1)
                              - lse[..., 1:])  # fmt: skip
    # Dot products in float32 (no float64 copy of q: it would double the path's memory), differences in float64.
    centred = lse.double() - logits(k_mean).double()
    row_entropy = centred - (scaling * torch.linalg.vecdot(q, k_mix)).double()
    rows = LayerRows(
        sink=entries(k[:, :, :1]),
        diag=entries(k),
        prev=prev,
        columns=log_columns.double().exp(),
        entropy=(row_entropy * entropy_weights(0, T, query.device)).sum(-1),
        out_norms=out.norm(dim=-1),
    )
    return out.transpose(1, 2).to(query.dtype).contiguous(), rows


def warn_fallback(error: Exception) -> None:
    """One warning when the compiled flex kernels cannot run here (the rows path, exact too, takes over)."""
    warnings.warn(f"sinkscope: flex_attention kernels unavailable ({type(error).__name__}: {error}); "
                  "using the slower rows path", RuntimeWarning, stacklevel=3)  # fmt: skip
