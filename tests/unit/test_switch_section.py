"""The switch / geometry / ablation report section: its data from run tables (the 2×2 agreement right, cells
formatted), drawn by its template."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sinkscope.report.page import environment
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


def render(section: dict) -> str:
    return str(environment().get_template("switch_section.html.j2").module.switch_section(section))


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
    heads = _heads()
    section = switch_section(heads, _layers(), ablation)
    assert section["missing"] == []
    table = section["ablation"]["table"]
    assert [c["text"] for c in table["header"]] == ["selection", "fraction", "n_heads", "delta_loss", "delta_std"]
    # random baseline: mean and sample std of its two draws; one draw has no std (an en dash)
    assert table["rows"] == [["lowest-ahon-ln", "0.100", "1", "+0.0100", "–"], ["random", "0.100", "1", "+0.2500", "0.0707"]]
    counts = section["switch"]["counts"]
    assert [c["text"] for c in counts["header"][:2]] == ["layer", "switch_n_off_sink"] and len(counts["rows"]) == 3
    assert counts["rows"][1][1] == str(heads[heads["layer"] == 1]["switch_n_off_sink"].sum())
    page = render(section)
    assert page.count("<img") == 4 and "Not shown" not in page and "+0.2500" in page
    assert "<details><summary>2×2 counts per layer</summary><table>" in page
    partial = switch_section(_heads().drop(columns=["switch_n_on_sink"]), _layers().drop(columns=["gamma1"]))
    assert partial["switch"] is None and partial["geometry"] is None and partial["ablation"] is None
    page = render(partial)
    assert page.count("<img") == 1 and "<details>" not in page
    assert '<p class="note">Not shown: switch counts missing from heads.parquet; gamma1/gamma2 missing from layers.parquet.</p>' in page
