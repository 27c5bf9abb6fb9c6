"""Pack causal attention maps into a small, exact-to-a-stated-bound byte string for the page.

What is kept: every entry of the causal part (row t, keys 0..t) of every head's map; the entries above the
diagonal are exactly 0 (causal) and are not stored. Each probability p ∈ [0, 1] becomes the 16-bit code
`q = round(p · 65535)`, so the page's `q / 65535` is within `QUANT_ERROR = 1/(2·65535) ≈ 7.6e-6` of p.
Layout: head (l, h) in row-major order, then query rows t = 0..T-1, each holding keys 0..t, i.e. head
`l·H + h` starts at entry `(l·H + h)·T(T+1)/2` and its row t at `t(t+1)/2` within it. The codes are stored as
two byte planes (all high bytes, then all low bytes: the high plane is mostly zeros and compresses well),
zlib-compressed and base64-encoded; the page decompresses them with the browser's `DecompressionStream`.
"""

from __future__ import annotations

import base64
import zlib

import numpy as np
from torch import Tensor

LEVELS = 65535
QUANT_ERROR = 0.5 / LEVELS


def quantise_maps(attn: Tensor) -> str:
    """(L, H, T, T) causal attention → base64 of zlib(high bytes ‖ low bytes) of the 16-bit codes."""
    T = attn.shape[-1]
    rows, cols = np.tril_indices(T)
    probs = attn.detach().float().cpu().numpy()[..., rows, cols]  # (L, H, T(T+1)/2)
    codes = np.rint(np.clip(probs, 0.0, 1.0) * LEVELS).astype(">u2").reshape(-1)  # big-endian: high byte first
    planes = codes.view(np.uint8).reshape(-1, 2).T  # (2, N): row 0 the high bytes, row 1 the low bytes
    return base64.b64encode(zlib.compress(np.ascontiguousarray(planes).tobytes(), 6)).decode("ascii")


def dequantise_maps(payload: str, layers: int, heads: int, seq_len: int) -> np.ndarray:
    """The inverse of `quantise_maps` up to `QUANT_ERROR`: (L, H, T, T) float64 with zeros above the diagonal."""
    planes = np.frombuffer(zlib.decompress(base64.b64decode(payload)), dtype=np.uint8).reshape(2, -1)
    codes = planes[0].astype(np.int64) * 256 + planes[1]
    rows, cols = np.tril_indices(seq_len)
    maps = np.zeros((layers, heads, seq_len, seq_len))
    maps[..., rows, cols] = codes.reshape(layers, heads, -1) / LEVELS
    return maps
