"""The flex path: plain causal attention and its `AttentionReadout` from two `flex_attention` calls, the path CUDA takes.

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
import torch.nn.functional as F
from torch import Tensor

from sinkscope.capture.readout import AttentionReadout, PackedReadout
from sinkscope.functional.patterns import entropy_weights

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


def _window_masks(window: int) -> tuple[Callable, Callable]:
    """Sliding-window forms of `_causal` and `_anti_causal`: key j visible to query t when `0 ≤ t − j < window`."""

    def causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    def anti_causal(b, h, q_idx, kv_idx):
        return (kv_idx >= q_idx) & (kv_idx - q_idx < window)

    return causal, anti_causal


@functools.cache
def _block_masks(seq_len: int, device: str, window: int | None = None) -> tuple[object, object]:
    """The causal mask of call 1 and the `t ≥ k` mask of call 2 (both within `window` where one is given), as
    flex block masks (built once per T and window)."""
    build = _flex_module.create_block_mask
    causal, anti_causal = (_causal, _anti_causal) if window is None else _window_masks(window)
    return (build(causal, None, None, seq_len, seq_len, device=device),
            build(anti_causal, None, None, seq_len, seq_len, device=device))  # fmt: skip


@functools.cache
def _outside_window(seq_len: int, window: int, device: str) -> Tensor:
    """(T, 4) booleans: which of the packed logits `S[t,0]`, `S[t,t]`, `S[t,t−1]`, `s q_t·k̄` name a key outside
    query t's window (key 0 for t ≥ window; key t−1 everywhere when the window is 1)."""
    rows = torch.arange(seq_len, device=device)
    outside = torch.zeros(seq_len, 4, dtype=torch.bool, device=device)
    outside[:, 0] = rows >= window
    outside[:, 2] = window < 2
    return outside


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


@functools.cache
def _row_constants(seq_len: int, device: str) -> tuple[Tensor, Tensor]:
    """The entropy weights `w_t = 1/log(t+1)` (`w_0 = 0`), float64, and the mask `t ≥ 1` (float32), per T."""
    return entropy_weights(0, seq_len, device), (torch.arange(seq_len, device=device) >= 1).float()


def flex_parts(
    query: Tensor, key: Tensor, value: Tensor, scaling: float, window: int | None = None
) -> tuple[Tensor, PackedReadout]:
    """Causal attention (B, T, H, Dv) like transformers', and its `AttentionReadout` packed (`PACKED`, module doc); with
    `window`, sliding-window attention (query t sees keys `t − window < j ≤ t`, Gemma-2/3's local layers): both
    calls take the window in their masks, and entries outside it (`A[t,0]` for t ≥ window) are 0.

    `query` (B, H, T, D), `key`/`value` (B, KV, T, ·) (GQA: query head h reads kv head `h // (H // KV)`). Besides
    the two kernels, a few dozen tensor operations per layer (each a kernel launch on an accelerator): the four
    logits `S[t,0]`, `S[t,t]`, `S[t,t−1]` and `s q_t·k̄` come from one product of q with the keys of each row
    stacked, `[k_0, k_t, k_{t−1}, k̄]`; turning the packed numbers into `AttentionReadout` (`unpack_rows`) waits until
    every layer's are stacked.
    """
    B, H, T, D = query.shape
    KV, Dv = key.shape[1], value.shape[-1]
    group = H // KV
    q, k = query.float(), key.float()
    k_mean = k.mean(2, keepdim=True)  # (B, KV, 1, D)
    window = None if window is None or window >= T else window
    causal, anti_causal = _block_masks(T, str(query.device), window)
    forward, log_column_sums = _kernels(query.device.type)
    mixed, lse = forward(q, k, torch.cat([value.float(), k - k_mean], -1), scaling, causal)
    keys = k.unsqueeze(2).expand(B, KV, group, T, D).reshape(B, H, T, D)  # kv head of every query head
    log_columns = log_column_sums(keys, q, lse, scaling, anti_causal)
    out, k_mix = mixed[..., :Dv], mixed[..., Dv:]
    # Row t's keys [k_0, k_t, k_{t−1}, k̄] (k_{−1} = 0, its entry masked in `unpack_rows`), (B, KV, 1, T, 4, D).
    row_keys = torch.stack([k[:, :, :1].expand(B, KV, T, D), k, F.pad(k, (0, 0, 1, 0))[:, :, :T],
                            k_mean.expand(B, KV, T, D)], 3).unsqueeze(2)  # fmt: skip
    q_scaled = (q * scaling).view(B, KV, group, T, 1, D)
    logits = (q_scaled * row_keys).sum(-1).view(B, H, T, 4)  # s q_t·[k_0, k_t, k_{t−1}, k̄]
    if window is not None:  # keys outside the window: logit −∞, entry exp(−∞ − lse) = 0
        logits = logits.masked_fill(_outside_window(T, window, str(query.device)), -torch.inf)
    # Dot products in float32 (no float64 copy of q: it would double the path's memory), differences in float64.
    mixed_logit = torch.linalg.vecdot(q_scaled.view(B, H, T, D), k_mix)  # s q_t·ō_t
    parts = torch.cat([logits, torch.stack([lse, mixed_logit, log_columns, out.norm(dim=-1)], -1)], -1)
    return out.transpose(1, 2).to(query.dtype).contiguous(), PackedReadout(parts, unpack_rows)


PACKED = ("S[t,0]", "S[t,t]", "S[t,t-1]", "s q_t·k̄", "lse_t", "s q_t·ō_t", "log c_t", "||o_t||")
"""What `flex_parts` packs for each head and query row, in this order (float32)."""


def unpack_rows(parts: Tensor) -> AttentionReadout:
    """`AttentionReadout` from packed rows (..., B, H, T, 8) of `flex_parts`, leading dimensions (layers) kept:
    `A[t,j] = exp(S[t,j] − lse_t)` for j = 0, t, t−1 (0 at t = 0), `c_t = exp(log c_t)` and the entropy sum
    `Σ_t w_t ((lse_t − s q_t·k̄) − s q_t·ō_t)` in float64 (module doc)."""
    weights, not_first = _row_constants(parts.shape[-2], str(parts.device))
    lse = parts[..., 4]
    entries = torch.exp(parts[..., :3] - lse.unsqueeze(-1))
    row_entropy = (lse.double() - parts[..., 3].double()) - parts[..., 5].double()
    return AttentionReadout(
        sink=entries[..., 0],
        diag=entries[..., 1],
        prev=entries[..., 2] * not_first,
        columns=parts[..., 6].double().exp(),
        entropy=(row_entropy * weights).sum(-1),
        out_norms=parts[..., 7],
    )


def flex_rows(
    query: Tensor, key: Tensor, value: Tensor, scaling: float, window: int | None = None
) -> tuple[Tensor, AttentionReadout]:
    """`flex_parts` with its `AttentionReadout` unpacked: the output (B, T, H, Dv) and one layer's rows (B, H, T)."""
    out, packed = flex_parts(query, key, value, scaling, window)
    return out, unpack_rows(packed.parts)


def warn_fallback(error: Exception) -> None:
    """One warning when the compiled flex kernels cannot run here (the rows path, exact too, takes over)."""
    warnings.warn(f"sinkscope: flex_attention kernels unavailable ({type(error).__name__}: {error}); "
                  "using the slower rows path", RuntimeWarning, stacklevel=3)  # fmt: skip
