"""Switch attribution's per-head table, model totals and saved files from hand-made counts, by hand (mutmut draw
54, 55): every column, the unexplained count from the last slot, NaN where nothing is off or nothing was counted;
the routes of a learned-sink model and its counter on one hand-made block."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pandas as pd
import torch

from sinkscope.functional.switch_routes import ALL_ROUTES
from sinkscope.pipelines.switch_attribution import (
    _Counter,
    attribution_table,
    available_routes,
    route_totals,
    save_attribution,
)

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


def test_routes_of_a_learned_sink_model_and_its_counter_by_hand():
    lm = SimpleNamespace(family=SimpleNamespace(output_gate=None, learned_sink="sinks"),
                         layout=SimpleNamespace(group=1, n_heads=1), layers=[None])  # fmt: skip
    routes = available_routes(lm)
    assert [r.name for r in routes] == ["bos_sink", "learned_sink", "cancellation", "learned_partial", "bos_partial",
                                        "self_small_value", "low_norm_keys"]  # fmt: skip
    gated = SimpleNamespace(family=SimpleNamespace(output_gate="q_proj", learned_sink=None))
    assert [r.name for r in available_routes(gated)][:2] == ["gate", "bos_sink"]
    counter = _Counter(lm, routes, tau=0.1, delta=0.1)
    counter.on_values(0, torch.ones(1, 1, 2, 4) * 0.5)  # ||v_j|| = 1 for both keys
    counter.on_learned_sink(0, 0, torch.tensor([[[0.0, 0.95]]]))  # query 1 puts 95 % on the learned sink column
    probs = torch.tensor([[[[1.0, 0.0], [0.03, 0.02]]]])
    out = torch.tensor([[[[1.0, 0, 0, 0], [0.001, 0, 0, 0]]]])  # ||o_1|| = 0.001 ≤ 0.1 · 1: switched off
    counter.on_block(0, 0, probs, torch.zeros(1, 1, 2), out)
    assert counter.counts[0, 0].tolist() == [0, 1, 0, 0, 0, 0, 0, 0]  # the hard learned sink, not BOS's partial
    assert counter.queries.tolist() == [[1]]
