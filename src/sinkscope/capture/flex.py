"""The flex path: causal attention and its `AttentionReadout` from `flex_attention` calls, the path CUDA takes.

No call forms the T×T map. With logits `S[t,j] = s q_t·k_j` (s the scale; `S' = c·tanh(S/c)` under a logit
softcap c, Gemma-2), the row normaliser `L_t` and `A[t,j] = exp(S'[t,j] − L_t)`:

1. Causal attention of `q` over `k` and its row log-normaliser `lse_t = log Σ_{j≤t} exp S'[t,j]`; the output is
   `o_t = Σ_j A[t,j] v_j`. Without a learned sink `L_t = lse_t`; with one (gpt-oss: a logit `σ_h` per head
   whose column takes mass and adds nothing), `L_t = logaddexp(lse_t, σ_h)`, the output is call 1's times
   `1 − m_t = exp(lse_t − L_t)` and `m_t = 1 − exp(lse_t − L_t)` is the sink's mass.
   For the row entropy over the real keys `H_t = −Σ_j A[t,j] log A[t,j] = (1 − m_t)(L_t − Σ_j A'[t,j] S'[t,j])`
   (A' = call 1's weights, rows summing to 1): without a softcap, in float32, the values are `[v_j, k_j − k̄]`
   (k̄ the window's mean key), so `Σ_j A' S = s q_t·k̄ + s q_t·ō_t` with `ō_t` the extra output columns.
   Centring the keys keeps the two terms small where keys share a large common part (massive activations).
2. The transposed attention: queries `k_k`, keys `q_t`, `score_mod` subtracting `L_t`, mask `t ≥ k`; its
   log-normaliser is `log Σ_{t≥k} exp(S'[t,k] − L_t) = log c_k`, the column sums (its output is not used).
3. Under a softcap, or in the model's precision (below), the entropy instead: call 1's mask with the `score_mod`
   `log A'[t,j] + log(−log A'[t,j])` (`A'[t,j] = exp(S'[t,j] − lse_t)`), whose log-normaliser is
   `log Σ_j A'[t,j](−log A'[t,j]) = log H'_t`, the entropy of call 1's row, with no cancellation; then
   `Σ_j A' S' = lse_t − H'_t`.
Any entry costs O(d): `A[t,0]`, `A[t,t]`, `A[t,t−1]` from their logits and `L_t`. Windows and masks:
`capture.flex_masks`.

Precision: "exact" (the default) runs every call on float32 copies of q, k and v, so every statistic equals the
float64 computation to about 1e-6 for bfloat16 models too. "model" runs them on q, k and v in the model's dtype:
the logits are then exact products accumulated in float32 (so `lse_t`, the entries, the column sums and the
entropy of call 3 stay float32-exact), but the kernel rounds `A'` to that dtype before the product with v and
returns the output in it, so the output and its norms carry the dtype's rounding (docs/performance.md, precision).
On CUDA each call is compiled by `torch.compile` into one fused kernel; on the CPU flex_attention runs eagerly and
materialises the scores, so the CPU routes elsewhere (`capture.attention.attention_path`) and only tests call
this path there.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from sinkscope.capture.flex_masks import flex_masks
from sinkscope.capture.readout import AttentionReadout, PackedReadout
from sinkscope.functional.patterns import entropy_weights

try:  # torch ≥ 2.5
    from torch.nn.attention import flex_attention as _flex_module
except ImportError:  # pragma: no cover - old torch: `available()` is False
    _flex_module = None

# torch.compile's backend for the CUDA kernels; tests trace the same functions with "aot_eager" on the CPU (the
# inductor CPU backend cannot return lse).
COMPILE_BACKEND = "inductor"
# The value head of the calls whose output is discarded: as narrow as flex_attention allows.
_UNUSED_VALUE_DIM = 16
# −log A'[t,j] below this counts as this in call 3 (a term of at most 1e-30 nats; never log 0 or of a rounding < 0)
_TINY = 1e-30
PRECISIONS = ("exact", "model")


def available() -> bool:
    """Whether this torch has `flex_attention` (torch ≥ 2.5)."""
    return _flex_module is not None


def _flex_with_lse(query: Tensor, key: Tensor, value: Tensor, scale: float, block_mask, score_mod=None,
                   enable_gqa: bool = False) -> tuple[Tensor, Tensor]:  # fmt: skip
    """`flex_attention` returning (output, lse), through `AuxRequest` where this torch has it."""
    common = dict(score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa)
    aux_request = getattr(_flex_module, "AuxRequest", None)
    if aux_request is not None:
        out, aux = _flex_module.flex_attention(query, key, value, return_aux=aux_request(lse=True), **common)
        return out, aux.lse
    return _flex_module.flex_attention(query, key, value, return_lse=True, **common)


def _capped(score: Tensor, softcap: float | None) -> Tensor:
    """`c·tanh(S/c)` under a logit softcap c, S otherwise."""
    return score if softcap is None else softcap * torch.tanh(score / softcap)


def _forward(query: Tensor, key: Tensor, value: Tensor, scale: float, block_mask,
             softcap: float | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Call 1: causal attention (GQA) and its row log-normaliser."""

    def capped(score, b, h, q_idx, kv_idx):
        return _capped(score, softcap)

    return _flex_with_lse(query, key, value, scale, block_mask, None if softcap is None else capped, enable_gqa=True)


def _log_column_sums(keys: Tensor, queries: Tensor, lse: Tensor, scale: float, block_mask,
                     softcap: float | None = None) -> Tensor:  # fmt: skip
    """Call 2: `log c_k` (B, H, T) from keys (B, H, T, D) attending to queries with `S'[t,k] − lse_t` (`lse`: the
    row normaliser L_t)."""

    def minus_row_lse(score, b, h, q_idx, kv_idx):
        score = _capped(score, softcap)
        return score - lse[b, h, kv_idx]

    unused = queries.new_zeros(*queries.shape[:-1], _UNUSED_VALUE_DIM)
    return _flex_with_lse(keys, queries, unused, scale, block_mask, score_mod=minus_row_lse)[1]


def _log_entropies(query: Tensor, key: Tensor, lse: Tensor, scale: float, block_mask,
                   softcap: float | None = None) -> Tensor:  # fmt: skip
    """Call 3: `log H'_t = log Σ_j A'[t,j](−log A'[t,j])` (B, H, T), `A'[t,j] = exp(S'[t,j] − lse_t)` (GQA)."""

    def times_minus_log(score, b, h, q_idx, kv_idx):
        log_a = _capped(score, softcap) - lse[b, h, q_idx]
        return log_a + torch.log(torch.clamp(-log_a, min=_TINY))

    unused = key.new_zeros(*key.shape[:-1], _UNUSED_VALUE_DIM)
    return _flex_with_lse(query, key, unused, scale, block_mask, times_minus_log, enable_gqa=True)[1]


@functools.cache
def _kernels(device_type: str) -> tuple[Callable, Callable, Callable]:
    """The three calls, compiled into fused kernels on CUDA (once per process), eager elsewhere."""
    if device_type != "cuda":
        return _forward, _log_column_sums, _log_entropies
    # A run sees one or two shapes (B, T) per layer call (its last batch may be smaller); a benchmark or a sweep
    # more. Automatic dynamic shapes compile once for the first shape and once more for all others; the limit is
    # raised so that dtypes, head layouts and forms beyond the default 8 recompilations never fall back to eager
    # flex (which would form the whole T×T map).
    config = torch._dynamo.config
    config.recompile_limit = max(getattr(config, "recompile_limit", 8), 64)
    return tuple(torch.compile(f, fullgraph=True, backend=COMPILE_BACKEND)
                 for f in (_forward, _log_column_sums, _log_entropies))  # fmt: skip


@functools.cache
def _row_constants(seq_len: int, device: str) -> tuple[Tensor, Tensor]:
    """The entropy weights `w_t = 1/log(t+1)` (`w_0 = 0`), float64, and the mask `t ≥ 1` (float32), per T."""
    return entropy_weights(0, seq_len, device), (torch.arange(seq_len, device=device) >= 1).float()


def flex_parts(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    scaling: float,
    window: int | None = None,
    *,
    mask: Tensor | None = None,
    softcap: float | None = None,
    sinks: Tensor | None = None,
    precision: str = "exact",
) -> tuple[Tensor, PackedReadout]:
    """Causal attention (B, T, H, Dv) like transformers', and its `AttentionReadout` packed (`PACKED`, module doc).

    `query` (B, H, T, D), `key`/`value` (B, KV, T, ·) (GQA: query head h reads kv head `h // (H // KV)`).
    `window`: sliding-window attention (query t sees keys `t − window < j ≤ t`); `mask`: a boolean attention mask
    (B or 1, 1, T, T), True = attend (padding; `capture.flex_masks`); `softcap`: logits `c·tanh(S/c)`; `sinks`
    (H,): learned sink logits σ_h (the packed rows then carry `log(1 − m_t)`, `learned_sink_mass` reads `m_t`);
    `precision`: "exact" or "model" (module doc). Besides the kernels, a few dozen tensor operations per layer
    (each a kernel launch on an accelerator): the four logits `S[t,0]`, `S[t,t]`, `S[t,t−1]` and `s q_t·k̄` come
    from one product of q with the keys of each row stacked, `[k_0, k_t, k_{t−1}, k̄]`; turning the packed
    numbers into `AttentionReadout` (`unpack_rows`) waits until every layer's are stacked.
    """
    B, H, T, D = query.shape
    KV, Dv = key.shape[1], value.shape[-1]
    group = H // KV
    q, k = query.float(), key.float()  # the packed logits: O(T·d), always in float32
    exact = precision == "exact"
    q_in, k_in, v_in = (q, k, value.float()) if exact else (query, key, value)
    window = None if window is None or window >= T else window
    causal, anti_causal, hidden = flex_masks(T, query.device, window, mask, B)
    forward, log_column_sums, log_entropies = _kernels(query.device.type)
    k_mean = k.mean(2, keepdim=True)  # (B, KV, 1, D)
    by_centred_keys = exact and softcap is None  # the entropy from call 1's extra columns, else from call 3
    mixed, lse = forward(q_in, k_in, torch.cat([v_in, k - k_mean], -1) if by_centred_keys else v_in, scaling,
                         causal, softcap)  # fmt: skip
    out = mixed[..., :Dv].float()
    norm = lse if sinks is None else torch.logaddexp(lse, sinks.float().view(1, H, 1))  # L_t
    keys = k_in.unsqueeze(2).expand(B, KV, group, T, D).reshape(B, H, T, D)  # kv head of every query head
    log_columns = log_column_sums(keys, q_in, norm, scaling, anti_causal, softcap)
    # Row t's keys [k_0, k_t, k_{t−1}, k̄] (k_{−1} = 0, its entry masked in `unpack_rows`), (B, KV, 1, T, 4, D).
    row_keys = torch.stack([k[:, :, :1].expand(B, KV, T, D), k, F.pad(k, (0, 0, 1, 0))[:, :, :T],
                            k_mean.expand(B, KV, T, D)], 3).unsqueeze(2)  # fmt: skip
    q_scaled = (q * scaling).view(B, KV, group, T, 1, D)
    logits = (q_scaled * row_keys).sum(-1).view(B, H, T, 4)  # s q_t·[k_0, k_t, k_{t−1}, k̄]
    if softcap is not None:
        logits = _capped(logits, softcap)
    if hidden is not None:  # keys the query does not see: logit −∞, entry exp(−∞ − L) = 0
        logits = logits.masked_fill(hidden, -torch.inf)
    if by_centred_keys:  # Σ_j A' S = s q_t·k̄ + s q_t·ō_t; mixed logit in float32, differences in float64 later
        centre, mixed_logit = logits[..., 3], torch.linalg.vecdot(q_scaled.view(B, H, T, D), mixed[..., Dv:])
    else:  # Σ_j A' S' = lse_t − H'_t
        centre, mixed_logit = lse, -log_entropies(q_in, k_in, lse, scaling, causal, softcap).exp()
    extra = []
    if sinks is not None:  # log(1 − m_t) = lse_t − L_t, without the cancellation
        log_kept = -F.softplus(sinks.float().view(1, H, 1) - lse)
        out = out * log_kept.exp().unsqueeze(-1)
        extra = [log_kept]
    if mask is not None:  # a query that sees no key (lse −∞): a row of zeros, not NaN
        empty = lse == -torch.inf
        norm, centre = norm.masked_fill(empty, 0.0), centre.masked_fill(empty, 0.0)
    parts = torch.cat([logits[..., :3], torch.stack([centre, norm, mixed_logit, log_columns, out.norm(dim=-1),
                                                     *extra], -1)], -1)  # fmt: skip
    return out.transpose(1, 2).to(query.dtype).contiguous(), PackedReadout(parts, unpack_rows)


PACKED = ("S'[t,0]", "S'[t,t]", "S'[t,t-1]", "x_t", "L_t", "y_t", "log c_t", "||o_t||")
"""What `flex_parts` packs for each head and query row, in this order (float32), and with a learned sink a ninth,
`log(1 − m_t)`: the entry logits, the row normaliser `L_t`, and `x_t`, `y_t` with `Σ_j A'[t,j] S'[t,j] = x_t + y_t`
(`s q_t·k̄` and `s q_t·ō_t`, or `lse_t` and `−H'_t`; module doc)."""


def unpack_rows(parts: Tensor) -> AttentionReadout:
    """`AttentionReadout` from packed rows (..., B, H, T, 8 or 9) of `flex_parts`, leading dimensions (layers) kept:
    `A[t,j] = exp(S'[t,j] − L_t)` for j = 0, t, t−1 (0 at t = 0), `c_t = exp(log c_t)` and the entropy sum
    `Σ_t w_t (1 − m_t)((L_t − x_t) − y_t)` in float64 (module doc)."""
    weights, not_first = _row_constants(parts.shape[-2], str(parts.device))
    lse = parts[..., 4]
    entries = torch.exp(parts[..., :3] - lse.unsqueeze(-1))
    row_entropy = (lse.double() - parts[..., 3].double()) - parts[..., 5].double()
    if parts.shape[-1] > len(PACKED):  # a learned sink: the real keys hold 1 − m_t of the row
        row_entropy = row_entropy * parts[..., 8].double().exp()
    return AttentionReadout(
        sink=entries[..., 0],
        diag=entries[..., 1],
        prev=entries[..., 2] * not_first,
        columns=parts[..., 6].double().exp(),
        entropy=(row_entropy * weights).sum(-1),
        out_norms=parts[..., 7],
    )


def learned_sink_mass(parts: Tensor) -> Tensor:
    """The learned sink's mass `m_t = 1 − exp(log(1 − m_t))` (..., B, H, T) from rows packed with a learned sink."""
    return -torch.expm1(parts[..., 8])


def flex_rows(
    query: Tensor, key: Tensor, value: Tensor, scaling: float, window: int | None = None, **form
) -> tuple[Tensor, AttentionReadout]:
    """`flex_parts` with its `AttentionReadout` unpacked: the output (B, T, H, Dv) and one layer's rows (B, H, T);
    `form`: `flex_parts`'s keywords."""
    out, packed = flex_parts(query, key, value, scaling, window, **form)
    return out, unpack_rows(packed.parts)


def warn_fallback(error: Exception) -> None:
    """One warning when the compiled flex kernels cannot run here (the rows path, exact too, takes over)."""
    warnings.warn(f"sinkscope: flex_attention kernels unavailable ({type(error).__name__}: {error}); "
                  "using the slower rows path", RuntimeWarning, stacklevel=3)  # fmt: skip
