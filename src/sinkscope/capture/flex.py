"""The flex path: causal attention and its `AttentionReadout` from `flex_attention` calls, the path CUDA takes.

No call forms the T×T map. With logits `S[t,j] = s q_t·k_j` (s the scale; `S' = c·tanh(S/c)` under a logit
softcap c, Gemma-2; plus an additive mask's bias, less its row's largest, with ALiBi: `_modified`), the row
normaliser `L_t` and `A[t,j] = exp(S'[t,j] − L_t)`:

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
3. Under a softcap or an additive mask, or in the model's precision (below), the entropy instead: call 1's mask with the `score_mod`
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

from sinkscope.capture.flex_masks import additive_parts, flex_masks
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


def _modified(score: Tensor, softcap: float | None, additive: tuple[Tensor, ...] | None, b, h, t, j) -> Tensor:
    """`S'[t,j]`: the logit, capped under a softcap; with an additive mask `(bias, shift, seen)` (expanded to
    (B, H, T, ·); `flex_masks.additive_parts`) `seen_t·S'[t,j] + (bias[t,j] − shift_t)`: the bias less the row's
    largest visible bias, and the logits dropped in a row whose every key is hidden (a uniform row, as in eager)."""
    score = _capped(score, softcap)
    if additive is None:
        return score
    bias, shift, seen = additive
    return score * seen[b, h, t] + (bias[b, h, t, j] - shift[b, h, t])


def _forward(query: Tensor, key: Tensor, value: Tensor, scale: float, block_mask, softcap: float | None = None,
             additive: tuple[Tensor, ...] | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Call 1: causal attention (GQA) and its row log-normaliser."""

    def modified(score, b, h, q_idx, kv_idx):
        return _modified(score, softcap, additive, b, h, q_idx, kv_idx)

    plain = softcap is None and additive is None
    return _flex_with_lse(query, key, value, scale, block_mask, None if plain else modified, enable_gqa=True)


def _log_column_sums(keys: Tensor, queries: Tensor, lse: Tensor, scale: float, block_mask,
                     softcap: float | None = None, additive: tuple[Tensor, ...] | None = None) -> Tensor:  # fmt: skip
    """Call 2: `log c_k` (B, H, T) from keys (B, H, T, D) attending to queries with `S'[t,k] − lse_t` (`lse`: the
    row normaliser L_t)."""

    def minus_row_lse(score, b, h, q_idx, kv_idx):
        return _modified(score, softcap, additive, b, h, kv_idx, q_idx) - lse[b, h, kv_idx]

    unused = queries.new_zeros(*queries.shape[:-1], _UNUSED_VALUE_DIM)
    return _flex_with_lse(keys, queries, unused, scale, block_mask, score_mod=minus_row_lse)[1]


def _log_entropies(query: Tensor, key: Tensor, lse: Tensor, scale: float, block_mask,
                   softcap: float | None = None, additive: tuple[Tensor, ...] | None = None) -> Tensor:  # fmt: skip
    """Call 3: `log H'_t = log Σ_j A'[t,j](−log A'[t,j])` (B, H, T), `A'[t,j] = exp(S'[t,j] − lse_t)` (GQA)."""

    def times_minus_log(score, b, h, q_idx, kv_idx):
        log_a = _modified(score, softcap, additive, b, h, q_idx, kv_idx) - lse[b, h, q_idx]
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
    """The entropy weights `w_t = 1/log(t+1)` (`w_0 = 0`), float64, and the (T, 3) float32 factors of the entries
    `A[t,0]`, `A[t,t]`, `A[t,t−1]`: 1, 1 and `t ≥ 1` (row 0 has no previous key), per T."""
    factors = torch.ones(seq_len, 3, device=device)
    factors[0, 2] = 0.0
    return entropy_weights(0, seq_len, device), factors


@functools.cache
def _kv_heads(heads: int, group: int, device: str) -> Tensor:
    """The kv head `h // group` of every query head h (made once per layout)."""
    return torch.arange(heads, device=device) // group


@functools.cache
def _row_keys(seq_len: int, centred: bool, device: str) -> Tensor:
    """Which rows of `[k_0 … k_{T−1}, ō_0 … ō_{T−1}, k̄]` the packed logits of query t read, (T·n,) in row order:
    `k_0`, `k_t`, `k_{t−1}` (`k_0` at t = 0, whose entry `unpack_rows` zeroes) and, with centred keys, `k̄` and
    `ō_t` (n = 5; else n = 3)."""
    t = torch.arange(seq_len, device=device)
    picked = [torch.zeros_like(t), t, (t - 1).clamp(min=0)]
    if centred:
        picked += [torch.full_like(t, 2 * seq_len), seq_len + t]
    return torch.stack(picked, -1).view(-1)


@functools.cache
def _x_column(device: str) -> Tensor:
    """(5,) booleans: which packed logit with centred keys is `x_t = s q_t·k̄`."""
    return torch.arange(5, device=device) == 3


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
    bias: Tensor | None = None,
    precision: str = "exact",
) -> tuple[Tensor, PackedReadout]:
    """Causal attention (B, T, H, Dv) like transformers', and its `AttentionReadout` packed (`PACKED`, module doc).

    `query` (B, H, T, D), `key`/`value` (B, KV, T, ·) (GQA: query head h reads kv head `h // (H // KV)`).
    `window`: sliding-window attention (query t sees keys `t − window < j ≤ t`); `mask`: a boolean attention mask
    (B or 1, 1, T, T), True = attend (padding; `capture.flex_masks`); `softcap`: logits `c·tanh(S/c)`; `sinks`
    (H,): learned sink logits σ_h (the packed rows then carry `log(1 − m_t)`, `learned_sink_mass` reads `m_t`);
    `bias`: an additive float mask (B or 1, H or 1, T, T) added to the logits (ALiBi, Falcon; the dtype's minimum
    where a key is hidden; `capture.flex_masks.additive_parts`); `precision`: "exact" or "model" (module doc). Besides the kernels, about twenty tensor operations per layer
    (each a kernel launch on an accelerator, views aside): the logits `S[t,0]`, `S[t,t]`, `S[t,t−1]` (and with
    centred keys `s q_t·k̄`, `s q_t·ō_t`) come from one product of q with the rows of each query picked out of one
    stacked source; turning the packed numbers into `AttentionReadout` (`unpack_rows`) waits until every layer's
    are stacked.
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
    keys = k_in.index_select(1, _kv_heads(H, group, str(query.device)))  # (B, H, T, D): each query head's keys
    additive, bias_entries = additive_parts(bias, B, H) if bias is not None else (None, None)
    by_centred_keys = exact and softcap is None and bias is None  # the entropy from call 1's extra columns, else call 3
    if by_centred_keys:
        k_mean = keys.mean(2, keepdim=True)  # (B, H, 1, D): k̄, the same within a kv group
        v_in = torch.cat([v_in, k - k_mean[:, ::group]], -1)
    mixed, lse = forward(q_in, k_in, v_in, scaling, causal, softcap, additive)
    out = mixed[..., :Dv].float()
    if sinks is not None:  # σ_h, less the row's bias shift where the logits carry it
        sink = sinks.float().view(1, H, 1) if additive is None else sinks.float().view(1, H, 1) - additive[1]
    norm = lse if sinks is None else torch.logaddexp(lse, sink)  # L_t
    log_columns = log_column_sums(keys, q_in, norm, scaling, anti_causal, softcap, additive)
    # Query t's rows [k_0, k_t, k_{t−1}(, k̄, ō_t)], picked from one source (B, H, T, 3 or 5, D), times s q_t.
    source = torch.cat([keys, mixed[..., Dv:], k_mean], 2) if by_centred_keys else keys.float()
    rows = source.index_select(2, _row_keys(T, by_centred_keys, str(query.device))).view(B, H, T, -1, D)
    logits = ((q * scaling).unsqueeze(3) * rows).sum(-1)  # s q_t·[k_0, k_t, k_{t−1}(, k̄, ō_t)]
    if softcap is not None:
        logits = _capped(logits, softcap)
    if bias_entries is not None:
        logits = logits * additive[2].unsqueeze(-1) + bias_entries
    if hidden is not None:  # keys the query does not see: logit −∞, entry exp(−∞ − L) = 0
        logits = logits.masked_fill(hidden[..., : logits.shape[-1]], -torch.inf)
    # Σ_j A' S' = x_t + y_t: s q_t·k̄ + s q_t·ō_t (in `logits`; differences in float64 later), else lse_t − H'_t
    x_and_y = [] if by_centred_keys else [lse, -log_entropies(q_in, k_in, lse, scaling, causal, softcap,
                                                              additive).exp()]  # fmt: skip
    if mask is not None:  # a query that sees no key (lse −∞): a row of zeros, not NaN (x_t and L_t set to 0)
        empty = lse == -torch.inf
        norm = norm.masked_fill(empty, 0.0)
        if by_centred_keys:
            logits = logits.masked_fill(empty.unsqueeze(-1) & _x_column(str(query.device)), 0.0)
        else:
            x_and_y[0] = lse.masked_fill(empty, 0.0)
    extra = []
    if sinks is not None:  # log(1 − m_t) = lse_t − L_t, without the cancellation
        log_kept = -F.softplus(sink - lse)
        out = out * log_kept.exp().unsqueeze(-1)
        extra = [log_kept]
    parts = torch.cat([logits, torch.stack([*x_and_y, norm, log_columns, out.norm(dim=-1), *extra], -1)], -1)
    return out.transpose(1, 2).to(query.dtype).contiguous(), PackedReadout(parts, unpack_rows)


PACKED = ("S'[t,0]", "S'[t,t]", "S'[t,t-1]", "x_t", "y_t", "L_t", "log c_t", "||o_t||")
"""What `flex_parts` packs for each head and query row, in this order (float32), and with a learned sink a ninth,
`log(1 − m_t)`: the entry logits, `x_t`, `y_t` with `Σ_j A'[t,j] S'[t,j] = x_t + y_t` (`s q_t·k̄` and `s q_t·ō_t`,
or `lse_t` and `−H'_t`; module doc) and the row normaliser `L_t`."""


def unpack_rows(parts: Tensor) -> AttentionReadout:
    """`AttentionReadout` from packed rows (..., B, H, T, 8 or 9) of `flex_parts`, leading dimensions (layers) kept:
    `A[t,j] = exp(S'[t,j] − L_t)` for j = 0, t, t−1 (0 at t = 0), `c_t = exp(log c_t)` and the entropy sum
    `Σ_t w_t (1 − m_t)((L_t − x_t) − y_t)` in float64 (module doc)."""
    weights, factors = _row_constants(parts.shape[-2], str(parts.device))
    sink, diag, prev = (torch.exp(parts[..., :3] - parts[..., 5:6]) * factors).unbind(-1)
    x, y, lse, log_columns, _, *log_kept = parts[..., 3:].double().unbind(-1)
    row_entropy = (lse - x) - y
    if log_kept:  # a learned sink: the real keys hold 1 − m_t of the row
        row_entropy = row_entropy * log_kept[0].exp()
    return AttentionReadout(
        sink=sink,
        diag=diag,
        prev=prev,
        columns=log_columns.exp(),
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
