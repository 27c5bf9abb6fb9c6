"""Spectra of a head's bilinear forms from its weight factors: `W_QK = W_Q W_Kᵀ` and `W_VO = W_V W_O`.

Both are d×d products of a (d, r) and an (r, d) factor (r = head_dim ≪ d), so their singular values are those
of an r×r core: with `left = Q₁R₁` and `rightᵀ = Q₂R₂` (thin QR), `left @ right = Q₁ (R₁R₂ᵀ) Q₂ᵀ`, and the SVD of
`R₁R₂ᵀ = U' S V'ᵀ` gives `U = Q₁U'`, `Vᵀ = V'ᵀQ₂ᵀ`. Everything is float64, batched over leading axes (heads).

Conventions (row vectors, SPEC): logits `l_ij = z_i W_QK z_jᵀ`, so a key enters through the right singular
vectors (rows of `Vh`); a value-output map acts as `y = x W_VO`, so an input enters through the left singular
vectors (columns of `U`).
"""

from __future__ import annotations

import torch
from torch import Tensor


def factored_svd(left: Tensor, right: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Thin SVD of `left @ right` without forming it. left (..., d, r), right (..., r, e), r ≤ min(d, e).

    Returns `U` (..., d, r), `S` (..., r) descending, `Vh` (..., r, e) with `left @ right = U diag(S) Vh`.
    """
    left, right = left.double(), right.double()
    q1, r1 = torch.linalg.qr(left)  # (..., d, r), (..., r, r)
    q2, r2 = torch.linalg.qr(right.transpose(-1, -2))  # (..., e, r), (..., r, r)
    u, s, vh = torch.linalg.svd(r1 @ r2.transpose(-1, -2))  # core (..., r, r)
    return q1 @ u, s, vh @ q2.transpose(-1, -2)


def nuclear_frobenius_ratio(s: Tensor) -> Tensor:
    """`||W||_* / ||W||_F = Σσ / sqrt(Σσ²)` over the last axis: 1 for rank 1, sqrt(r) for r equal values."""
    return s.sum(-1) / s.pow(2).sum(-1).sqrt().clamp_min(1e-300)


def effective_rank(s: Tensor) -> Tensor:
    """Roy & Vetterli's effective rank `exp(H(p))`, `p = σ / Σσ`, over the last axis (1 ≤ value ≤ rank)."""
    p = s / s.sum(-1, keepdim=True).clamp_min(1e-300)
    entropy = -torch.special.xlogy(p, p).sum(-1)  # 0·log 0 = 0
    return entropy.exp()


def probe_alignment(u: Tensor, s: Tensor, vh: Tensor, probe: Tensor, side: str) -> tuple[Tensor, Tensor]:
    """How a direction `probe` (d,) (e.g. the BOS attention input z_0) meets `W = U diag(S) Vh`.

    side "right": the probe enters as `W p̂ᵀ` (a key of `W_QK`); "left": as `p̂ W` (an input of `W_VO`).
    Returns `(alignment, gain)`, each (...): alignment = |cos| between p̂ and the top singular vector of that
    side; gain = `||W p̂ᵀ|| / σ₁` (resp. `||p̂ W|| / σ₁`), 1 when p̂ is a top direction, 0 in the null space.
    """
    unit = probe.double() / probe.double().norm().clamp_min(1e-300)
    if side == "right":
        coords = vh @ unit  # (..., r): p̂ in the right singular basis
    elif side == "left":
        coords = unit @ u  # (..., r)
    else:
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    gain = (coords * s).norm(dim=-1) / s[..., 0].clamp_min(1e-300)
    return coords[..., 0].abs(), gain
