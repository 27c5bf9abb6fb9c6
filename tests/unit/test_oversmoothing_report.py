"""The report's oversmoothing section on hand-made tables: numbers by hand, figures present, gaps noted."""

import numpy as np
import pandas as pd

from sinkscope.report.smoothing_section import smoothing_section, smoothing_summary


def tables():
    rows, curves = [], []
    for layer in range(3):
        for head in range(4):
            b = -1.0 if (layer, head) in {(1, 2), (2, 0)} else 0.5  # two heads with 2b + c = -1 < 0
            d_obs = -0.01 if (layer, head) == (1, 2) else 0.02  # one of them is also observed to fall
            rows.append({"layer": layer, "head": head, "smooth_b": b, "smooth_c": 1.0, "smooth_dense_more": 2 * b + 1 > 0,
                         "smooth_dcos_pred": 0.01 * (2 * b + 1), "smooth_dcos_obs": d_obs})  # fmt: skip
        for head in (*range(4), -1):
            for lam in (0.0, 0.5, 1.0):
                curves.append({"layer": layer, "head": head, "lam": lam, "cos_pred": 0.3 + 0.1 * lam, "cos_obs": 0.3 + 0.05 * lam})
    layers = pd.DataFrame({"layer": range(3), "smooth_cos_input": [0.2, 0.3, 0.4], "smooth_cos_real": [0.3, 0.4, 0.5]})
    return pd.DataFrame(rows), layers, pd.DataFrame(curves)


def test_summary_counts():
    heads, _, _ = tables()
    s = smoothing_summary(heads)
    assert s["frac_dense_more"] == 10 / 12
    assert s["frac_observed_rise"] == 11 / 12
    assert s["sign_agreement"] == 11 / 12  # (2, 0): predicted to counteract, observed to rise
    assert s["counteracting"] == [(1, 2), (2, 0)] and s["observed_counteracting"] == [(1, 2)]


def test_section_has_figures_and_numbers():
    heads, layers, curves = tables()
    fragment = smoothing_section(heads, layers, curves)
    assert fragment.count("<img") == 4
    assert "83% of 12 heads" in fragment and "L1H2" in fragment
    assert np.isfinite(smoothing_summary(heads)["sign_agreement"])


def test_missing_columns_are_noted_not_fatal():
    assert "Not shown" in smoothing_section(pd.DataFrame({"layer": [0], "head": [0]}))
    heads, _, _ = tables()
    assert "Not shown: λ-curves" in smoothing_section(heads)
