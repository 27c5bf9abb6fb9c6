"""Pack causal attention maps into a small, exact-to-a-stated-bound byte string for the page.

What is kept: every entry of the causal part (row t, keys 0..t) of every head's map; the entries above the
diagonal are exactly 0 (causal) and are not stored. With `bits` b ∈ {8, 12, 16}, each probability p ∈ [0, 1]
becomes the code `q = round(p · (2^b - 1))`, so the page's `q / (2^b - 1)` is within `quant_error(b) =
1/(2·(2^b - 1))` of p (8: 2.0e-3, 12: 1.2e-4, 16: 7.6e-6).
Layout: head (l, h) in row-major order, then query rows t = 0..T-1, each holding keys 0..t, i.e. head
`l·H + h` holds `T(T+1)/2` entries, its row t starting at `t(t+1)/2`. Each head is its own zlib stream (so the
page decompresses the head it shows first and the rest in the background, with the browser's
`DecompressionStream`); a head without a softmax map (NaN throughout: a linear-attention layer) has an empty
stream; within a head, codes over 8 bits are stored as two byte planes (all high bytes, then all
low bytes: the high plane is mostly zeros and compresses well), 8-bit codes as one. The streams are concatenated
and base64-encoded; `offsets[i]` is where head i's stream starts (the last entry: the total length).
"""

from __future__ import annotations

import base64
import zlib

import numpy as np
from torch import Tensor

BITS = (8, 12, 16)


def levels(bits: int) -> int:
    """Largest code: p = 1 maps to `2^bits - 1`."""
    return (1 << bits) - 1


def quant_error(bits: int) -> float:
    """Bound on |shown - p| from rounding to the nearest code: half a step."""
    return 0.5 / levels(bits)


def quantise_maps(attn: Tensor, bits: int = 16) -> tuple[str, list[int]]:
    """(L, H, T, T) causal attention → (base64 of the heads' zlib streams, their byte offsets)."""
    T = attn.shape[-1]
    rows, cols = np.tril_indices(T)
    probs = attn.detach().float().cpu().numpy()[..., rows, cols].reshape(-1, len(rows))  # (L·H, T(T+1)/2)
    codes = np.rint(np.clip(probs, 0.0, 1.0) * levels(bits))
    streams, offsets = [], [0]
    for head in codes:
        if np.isnan(head).all():  # no softmax map: nothing stored, read back as NaN
            raw = b""
        elif bits <= 8:
            raw = head.astype(np.uint8).tobytes()
        else:  # big-endian: each code's high byte first, so the (2, N) view is (high plane, low plane)
            raw = np.ascontiguousarray(head.astype(">u2").view(np.uint8).reshape(-1, 2).T).tobytes()
        streams.append(zlib.compress(raw, 6) if raw else b"")
        offsets.append(offsets[-1] + len(streams[-1]))
    return base64.b64encode(b"".join(streams)).decode("ascii"), offsets


def dequantise_maps(
    payload: str, offsets: list[int], layers: int, heads: int, seq_len: int, bits: int = 16
) -> np.ndarray:
    """The inverse of `quantise_maps` up to `quant_error(bits)`: (L, H, T, T) float64, zeros above the diagonal;
    NaN for a head stored without a map (an empty stream)."""
    blob = base64.b64decode(payload)
    rows, cols = np.tril_indices(seq_len)
    maps = np.zeros((layers * heads, seq_len, seq_len))
    for index in range(layers * heads):
        if offsets[index] == offsets[index + 1]:
            maps[index] = np.nan
            continue
        raw = np.frombuffer(zlib.decompress(blob[offsets[index] : offsets[index + 1]]), dtype=np.uint8)
        codes = raw.astype(np.int64) if bits <= 8 else raw[: len(rows)].astype(np.int64) * 256 + raw[len(rows) :]
        maps[index, rows, cols] = codes / levels(bits)
    return maps.reshape(layers, heads, seq_len, seq_len)
