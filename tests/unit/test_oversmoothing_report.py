"""The report's oversmoothing section on hand-made tables: numbers by hand, figures present, gaps noted; its template
draws the data."""

import numpy as np
import pandas as pd

from sinkscope.report.page import environment
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


def render(section: dict) -> str:
    return str(environment().get_template("smoothing_section.html.j2").module.smoothing_section(section))


def test_summary_counts():
    heads, _, _ = tables()
    s = smoothing_summary(heads)
    assert s["frac_dense_more"] == 10 / 12
    assert s["frac_observed_rise"] == 11 / 12
    assert s["sign_agreement"] == 11 / 12  # (2, 0): predicted to counteract, observed to rise
    assert s["counteracting"] == [(1, 2), (2, 0)] and s["observed_counteracting"] == [(1, 2)]


def test_section_has_figures_and_numbers():
    heads, layers, curves = tables()
    section = smoothing_section(heads, layers, curves)
    assert section["numbers"] == {"n_heads": 12, "frac_dense_more": "83%", "frac_observed_rise": "92%",
                                  "sign_agreement": "92%", "measured": None}  # 10/12, 11/12, 11/12
    assert section["counteracting"] == ["L1H2"] and not section["curves_missing"]
    assert len(section["figures"]) == 4
    page = render(section)
    assert page.count("<img") == 4
    assert "83% of 12 heads satisfy 2b + c &gt; 0" in page and "(counteracting smoothing): L1H2.</p>" in page
    assert "measured moments" not in page
    measured = heads.assign(smooth_dense_more_measured=heads["smooth_dcos_obs"] > 0)  # agrees with every observation
    assert "With the measured moments of the attention input instead of the linearised norm: 92% predicted, agreement 100%." in render(
        smoothing_section(measured, layers, curves))  # fmt: skip
    assert "(counteracting smoothing): none.</p>" in render(smoothing_section(heads.assign(smooth_dcos_obs=0.1)))


def test_missing_columns_are_noted_not_fatal():
    assert smoothing_section(pd.DataFrame({"layer": [0], "head": [0]})) == {"numbers": None}
    assert "Not shown: no smoothing columns in heads.parquet" in render({"numbers": None})
    heads, _, _ = tables()
    section = smoothing_section(heads)
    assert section["curves_missing"] and len(section["figures"]) == 2
    assert "Not shown: λ-curves" in render(section)
    assert np.isfinite(smoothing_summary(heads)["sign_agreement"])
