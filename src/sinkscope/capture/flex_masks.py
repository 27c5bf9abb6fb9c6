"""The masks of the flex path (`capture.flex`): which keys each query sees, in call 1 and in the transposed call 2.

Three forms, each as a pair of flex block masks (call 1: query t sees key j; call 2: key k sees query t, the same
relation transposed) and, for the logits `flex_parts` packs per row (`S[t,0]`, `S[t,t]`, `S[t,t−1]` and with centred
keys `s q_t·k̄`, `s q_t·ō_t`), which of them name a key the query does not see (their entry `A[t,j]` is then 0):

- plain causal attention: `j ≤ t`;
- a sliding window (Gemma-2/3's local layers, transformers' `sliding_window`): `0 ≤ t − j < W`;
- a boolean attention mask `M` (B or 1, 1, T, T) as transformers' sdpa mask function builds it (padding, and the
  window where there is one), True = attend: `M[b, 0, t, j] ∧ j ≤ t` (causality is kept even if `M` lacks it).
  A query that sees no key (a left-padding position) gets a row of zeros: no output, no entry, no entropy, no
  column mass.

An additive float mask (ALiBi, Falcon: the bias where a key is seen, the dtype's minimum where hidden) is added to
the logits inside the calls, with the causal block masks: `additive_parts`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

try:  # torch ≥ 2.5
    from torch.nn.attention import flex_attention as _flex_module
except ImportError:  # pragma: no cover - old torch: `flex.available()` is False
    _flex_module = None


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
    """(T, 5) booleans: which of the packed logits `S[t,0]`, `S[t,t]`, `S[t,t−1]`, `s q_t·k̄`, `s q_t·ō_t` name a
    key outside query t's window (key 0 for t ≥ window; key t−1 everywhere when the window is 1)."""
    rows = torch.arange(seq_len, device=device)
    outside = torch.zeros(seq_len, 5, dtype=torch.bool, device=device)
    outside[:, 0] = rows >= window
    outside[:, 2] = window < 2
    return outside


def _tensor_masks(mask: Tensor, batch: int) -> tuple[object, object, Tensor]:
    """Block masks of call 1 and call 2 from a boolean mask `M` (B or 1, 1, T, T), and the (B, 1, T, 5) booleans
    of the packed logits whose key query t does not see (`~M[b,0,t,j]` for j = 0, t, t−1; k̄ and ō_t always seen)."""
    T = mask.shape[-1]
    allowed = mask.expand(batch, 1, T, T)

    def visible(b, h, q_idx, kv_idx):
        return allowed[b, 0, q_idx, kv_idx] & (q_idx >= kv_idx)

    def transposed(b, h, q_idx, kv_idx):
        return allowed[b, 0, kv_idx, q_idx] & (kv_idx >= q_idx)

    build = _flex_module.create_block_mask
    rows = allowed[:, 0]  # (B, T, T)
    previous = torch.cat([rows.new_zeros(batch, 1), rows.diagonal(-1, -2, -1)], -1)  # M[t,t−1]; none at t = 0
    always = torch.ones_like(previous)
    seen = torch.stack([rows[..., 0], rows.diagonal(0, -2, -1), previous, always, always], -1)
    return (build(visible, batch, None, T, T, device=mask.device),
            build(transposed, batch, None, T, T, device=mask.device), ~seen.unsqueeze(1))  # fmt: skip


_last_tensor_masks: tuple[Tensor, int, tuple[object, object, Tensor]] | None = None


def flex_masks(seq_len: int, device: torch.device, window: int | None, mask: Tensor | None,
               batch: int) -> tuple[object, object, Tensor | None]:  # fmt: skip
    """(call 1's block mask, call 2's, the packed logits' hidden entries or None) for plain causal attention, a
    sliding `window` shorter than T, or a boolean attention `mask` (which wins over `window`: it holds the window
    and any padding). A mask's block masks are kept for the next call with the same mask tensor (the layers of one
    forward pass share it), so they are built once per forward pass, not per layer."""
    global _last_tensor_masks
    if mask is not None:
        last = _last_tensor_masks
        if last is None or last[0] is not mask or last[1] != batch:
            last = _last_tensor_masks = (mask, batch, _tensor_masks(mask, batch))
        return last[2]
    causal, anti_causal = _block_masks(seq_len, str(device), window)
    return causal, anti_causal, None if window is None else _outside_window(seq_len, window, str(device))


_last_additive: tuple[Tensor, int, int, tuple[tuple[Tensor, ...], Tensor]] | None = None
# A row whose largest visible bias is below this sees no key (its biases are all the dtype's minimum).
_HIDDEN = -1e30


def additive_parts(bias: Tensor, batch: int, heads: int) -> tuple[tuple[Tensor, ...], Tensor]:
    """For an additive mask `bias` (B or 1, H or 1, T, T): `(bias, shift, seen)` expanded to (B, H, T, T), (B, H, T)
    and (B, H, T) — `shift_t = max_{j ≤ t} bias[t,j]` (float32), which the calls subtract from row t's bias, and
    `seen_t` 1.0 where row t sees a key, 0.0 where every key is hidden — and the (B or 1, H or 1, T, 3) float32
    `bias[t,j] − shift_t` of the packed entries j = 0, t, t−1 (j = 0 at t = 0).

    Subtracting a row's constant leaves its softmax unchanged, and keeps the logits from vanishing into the dtype's
    minimum. In a row whose every key is hidden (left padding), eager attention adds the minimum to every logit and
    the logits vanish in it: a uniform row, which `seen_t = 0` gives. Kept for the next call with the same mask
    tensor (the layers of one forward pass share it), so it is computed once per forward pass."""
    global _last_additive
    last = _last_additive
    if last is None or last[0] is not bias or last[1:3] != (batch, heads):
        T = bias.shape[-1]
        rows = bias.float()
        visible = torch.ones(T, T, dtype=torch.bool, device=bias.device).tril()
        shift = rows.masked_fill(~visible, -torch.inf).amax(-1)  # (B or 1, H or 1, T)
        diagonal = rows.diagonal(0, -2, -1)
        previous = torch.cat([diagonal[..., :1], rows.diagonal(-1, -2, -1)], -1)  # bias[t,t−1]; bias[0,0] at t = 0
        entries = torch.stack([rows[..., 0], diagonal, previous], -1) - shift.unsqueeze(-1)
        seen = (shift > _HIDDEN).float()
        full = (bias.expand(batch, heads, T, T), shift.expand(batch, heads, T), seen.expand(batch, heads, T))
        last = _last_additive = (bias, batch, heads, (full, entries))
    return last[3]
