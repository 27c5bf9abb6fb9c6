"""The switch / geometry / ablation report section renders from run tables, with the 2×2 agreement right."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sinkscope.report.switch_section import switch_section, switch_table


def _heads(n_layers: int = 3, n_heads: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            counts = rng.integers(0, 50, size=4)
            rows.append(
                {
                    "layer": layer, "head": head, "switch_n_off_sink": counts[0], "switch_n_off_nosink": counts[1],
                    "switch_n_on_sink": counts[2], "switch_n_on_nosink": counts[3],
                    "switch_agreement": counts[0] / max(1, counts[0] + counts[1]), "value_drain": rng.uniform(0.01, 3),
                    "ahon_ln": rng.uniform(0, 2), "hard_sink_frac": rng.uniform(),
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


def _layers(n_layers: int = 3) -> pd.DataFrame:
    frame = pd.DataFrame({"layer": range(n_layers), "gamma1": [0.0, 0.2, 0.3], "gamma2": [0.5, 0.6, 0.0]})
    frame["sink_representable"] = (frame["gamma1"] > 0) & (frame["gamma2"] > 0)
    for kind in ("z", "h"):
        frame[f"bos_cos_mean_{kind}"] = [0.1, -0.2, -0.3]
        frame[f"bos_cos_max_{kind}"] = [0.5, 0.1, 0.0]
        frame[f"bos_cos_nonpos_frac_{kind}"] = [0.2, 0.7, 0.9]
    return frame


def test_switch_table_pools_heads_per_layer():
    heads = _heads()
    table = switch_table(heads).set_index("layer")
    for layer, rows in heads.groupby("layer"):  # brute force
        off_sink = rows["switch_n_off_sink"].sum()
        off = off_sink + rows["switch_n_off_nosink"].sum()
        sink = off_sink + rows["switch_n_on_sink"].sum()
        assert table.loc[layer, "agreement"] == pytest.approx(off_sink / off)
        assert table.loc[layer, "off_given_sink"] == pytest.approx(off_sink / sink)


def test_section_renders_all_panels_and_notes_missing_ones():
    ablation = pd.DataFrame(
        {"selection": ["lowest-ahon-ln", "random", "random"], "fraction": [0.1, 0.1, 0.1], "n_heads": [1, 1, 1],
         "delta_loss": [0.01, 0.2, 0.3], "mode": ["zero"] * 3}
    )  # fmt: skip
    html = switch_section(_heads(), _layers(), ablation)
    assert html.count("<img") == 4 and "Not shown" not in html
    assert "+0.2500" in html  # random baseline: mean of its draws
    partial = switch_section(_heads().drop(columns=["switch_n_on_sink"]), _layers().drop(columns=["gamma1"]))
    assert partial.count("<img") == 1 and "switch counts missing" in partial and "gamma1/gamma2 missing" in partial
