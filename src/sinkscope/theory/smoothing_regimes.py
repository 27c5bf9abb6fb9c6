"""The four regimes of the oversmoothing condition (SPEC §5; docs/theory.md) for one head's traces b = tr(ΣW),
c = tr(WᵀΣW) ≥ 0, along `A_λ = (1−λ) I + λ U`: d cos/dλ has the sign of `b + (1−λ) c`, so

- `monotone`: b ≥ 0 — cosine rises all the way to dense attention;
- `peak, dense more`: −c/2 < b < 0 — an interior maximum at λ* = 1 + b/c, and dense still smooths more than the
  identity (2b + c > 0);
- `peak, dense less`: −c < b ≤ −c/2 — an interior maximum, but dense smooths less than the identity;
- `resists`: b ≤ −c — cosine falls all the way: attention (with its skip and W) counters smoothing.
"""

from __future__ import annotations

REGIMES = ("monotone", "peak, dense more", "peak, dense less", "resists")


def smoothing_regime(b: float, c: float) -> str:
    """The regime of (b, c) among `REGIMES` (c < 0 cannot come from a covariance and is refused)."""
    if c < 0:
        raise ValueError(f"c = tr(WᵀΣW) = {c} < 0 is not a trace of a positive semi-definite form")
    if b >= 0:
        return REGIMES[0]
    if b <= -c:
        return REGIMES[3]
    return REGIMES[1] if 2 * b + c > 0 else REGIMES[2]
