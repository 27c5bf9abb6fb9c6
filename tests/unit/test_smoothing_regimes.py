"""The regimes of the oversmoothing condition against the closed-form curve cos(λ) = M / (M + a + 2sb + s²c),
s = 1 − λ (SPEC §5, full uniform, T → ∞), evaluated on a fine grid."""

from __future__ import annotations

import numpy as np
import pytest

from sinkscope.theory.smoothing_regimes import smoothing_regime


def test_regimes_against_the_curve():
    rng = np.random.default_rng(0)
    lam = np.linspace(0, 1, 2001)
    seen = set()
    for _ in range(400):
        c = rng.uniform(0.1, 3)
        b = rng.uniform(-2 * c, c)
        M, a = rng.uniform(0.5, 3), rng.uniform(4 * c, 8 * c)  # a ≥ c ≥ ... keeps the denominator positive
        s = 1 - lam
        cos = M / (M + a + 2 * s * b + s**2 * c)
        peak = lam[np.argmax(cos)]
        regime = smoothing_regime(b, c)
        seen.add(regime)
        if regime == "monotone":
            assert peak == 1.0
        elif regime == "resists":
            assert peak == 0.0
        else:
            assert 0 < peak < 1 and peak == pytest.approx(1 + b / c, abs=1e-3)
            assert (cos[-1] > cos[0]) == (regime == "peak, dense more")
    assert len(seen) == 4


def test_negative_c_refused():
    with pytest.raises(ValueError, match="c = "):
        smoothing_regime(0.1, -1.0)
