"""Switch attribution's per-head table, model totals and saved files from hand-made counts, by hand (mutmut draw
54): every column, the unexplained count from the last slot, NaN where nothing is off or nothing was counted."""

from __future__ import annotations

import json
import math

import pandas as pd
import torch

from sinkscope.functional.switch_routes import ALL_ROUTES
from sinkscope.pipelines.switch_attribution import attribution_table, route_totals, save_attribution

ROUTES = tuple(r for r in ALL_ROUTES if r.name in ("bos_sink", "cancellation"))


def _table() -> pd.DataFrame:
    counts = torch.tensor([[[2, 1, 0], [0, 0, 0]], [[9, 9, 9], [9, 9, 9]], [[1, 3, 4], [5, 0, 0]]])  # (L, H, R + 1)
    queries = torch.tensor([[10, 0], [7, 7], [20, 5]])
    return attribution_table(counts, queries, ROUTES, [0, 2])  # layer 1 has no softmax map: left out


def test_attribution_table_by_hand():
    table = _table()
    assert [r.name for r in ROUTES] == ["bos_sink", "cancellation"]
    assert list(table.columns) == ["layer", "head", "n_queries", "n_off", "off_frac", "n_bos_sink", "n_cancellation",
                                   "share_bos_sink", "share_cancellation", "unexplained"]  # fmt: skip
    assert table[["layer", "head", "n_queries", "n_off", "n_bos_sink", "n_cancellation", "unexplained"]].values.tolist() \
        == [[0, 0, 10, 3, 2, 1, 0], [0, 1, 0, 0, 0, 0, 0], [2, 0, 20, 8, 1, 3, 4], [2, 1, 5, 5, 5, 0, 0]]
    assert table["off_frac"].tolist()[::2] == [0.3, 0.4] and math.isnan(table["off_frac"][1])
    assert table["off_frac"][3] == 1.0
    assert table["share_bos_sink"].tolist()[2:] == [1 / 8, 1.0] and table["share_cancellation"][2] == 3 / 8
    assert math.isnan(table["share_bos_sink"][1]) and math.isnan(table["share_cancellation"][1])


def test_route_totals_and_saved_files(tmp_path):
    table = _table()
    totals = route_totals(table)
    assert totals == {"off_frac": 16 / 35, "n_off": 16, "shares": {"bos_sink": 8 / 16, "cancellation": 4 / 16}}
    none_off = route_totals(table.assign(n_off=0))
    assert none_off["off_frac"] == 0 and all(math.isnan(v) for v in none_off["shares"].values())
    meta = {"model": "tiny-llama", "tau": 0.1}
    summary = save_attribution(tmp_path / "a", table, meta)
    assert summary == {**meta, **totals}
    assert json.loads((tmp_path / "a" / "attribution.json").read_text()) == summary
    assert (tmp_path / "a" / "attribution.json").read_text() == json.dumps(summary, indent=2)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a" / "attribution.parquet"), table)
    csv = pd.read_csv(tmp_path / "a" / "attribution.csv")
    assert list(csv.columns) == list(table.columns) and csv["n_off"].tolist() == [3, 0, 8, 5]
    assert (tmp_path / "a" / "figures" / "attribution.png").read_bytes()[:4] == b"\x89PNG"
    from sinkscope.report import attribution_section

    titles = []
    original = attribution_section.attribution_figure

    def spy(frame, suffix=""):
        titles.append(suffix)
        pd.testing.assert_frame_equal(frame, table)
        return original(frame, suffix)

    attribution_section.attribution_figure = spy
    try:
        save_attribution(tmp_path / "b", table, meta)
        save_attribution(tmp_path / "c", table, {})
    finally:
        attribution_section.attribution_figure = original
    assert titles == [" · tiny-llama", " · "]
    save_attribution(tmp_path / "a", table.iloc[:1], meta)  # an earlier attribution result is replaced whole
    assert len(pd.read_parquet(tmp_path / "a" / "attribution.parquet")) == 1
