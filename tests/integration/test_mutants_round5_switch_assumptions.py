"""The switch assumptions checked whole: every field of every listed switched-off non-sink query, the per-layer
and category tables and the conditioned agreement (with its bootstrap written as a loop) against plain `transformers`
eager maps and value vectors; `run_switch_assumptions`'s meta and `save_switch_assumptions`'s files read back
(mutmut draw 54)."""

from __future__ import annotations

import json
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from tests.integration.test_mutants_round5_eviction import page_parts, page_settings
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines import switch_assumptions
from sinkscope.pipelines.switch_assumptions import (
    CATEGORIES,
    SwitchConfig,
    categorize,
    conditioned,
    run_switch_assumptions,
    save_switch_assumptions,
    switch_masks,
)

VOCAB, BOS, T = 64, 0, 10


class Batches(list):
    def identity(self) -> dict:
        return {"source": "hand-made ids"}


def _lm() -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                         initializer_range=0.5, bos_token_id=BOS, eos_token_id=1)  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={"name": "tiny-llama"})


def test_offenders_layers_categories_and_meta_against_loops(tmp_path):
    lm = _lm()
    ids = torch.randint(3, VOCAB, (3, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    config = SwitchConfig(tau=0.5, delta=0.6, bootstrap=50, seed=3)
    before = time.perf_counter()
    result = run_switch_assumptions(lm, Batches([ids[:2], ids[2:]]), config)
    elapsed = time.perf_counter() - before
    values = {}
    hooks = [lm.model.model.layers[i].self_attn.v_proj.register_forward_hook(
        lambda _m, _a, out, i=i: values.__setitem__(i, out)) for i in range(2)]  # fmt: skip
    lm.model.set_attn_implementation("eager")
    maps = lm.model(input_ids=ids, output_attentions=True).attentions
    for h in hooks:
        h.remove()
    offenders = result["offenders"].set_index(["window", "layer", "head", "t"])
    assert len(offenders) > 0
    for (b, layer, head, t), row in offenders.iterrows():
        a = maps[layer][b, head, t].double()
        v = values[layer].double().view(3, T, 2, 16)[b, :, head // 2]
        scale = sum(v[j].norm() for j in range(t + 1)) / (t + 1)
        others = [(float(a[j]), j) for j in range(1, t)]  # keys other than BOS and the query itself
        top_mass, top = max(others) if others else (0.0, 0)
        assert row["token"] == int(ids[b, t])
        assert (row["a0"], row["a_self"], row["top_mass"]) == pytest.approx((float(a[0]), float(a[t]), top_mass))
        assert row["top_key"] == top
        assert row["top_value_ratio"] == pytest.approx(float(v[top].norm() / scale))
        assert row["self_value_ratio"] == pytest.approx(float(v[t].norm() / scale))
        assert row["category"] == categorize(float(a[0]), float(a[t]), top_mass)
    assert list(result["offenders"].columns) == ["window", "layer", "head", "t", "token", "a0", "a_self", "top_key",
                                                 "top_mass", "top_value_ratio", "self_value_ratio", "category"]
    cells = result["cells"]
    layers = result["layers"].set_index("layer")
    for layer in range(2):
        mine = cells[cells["layer"] == layer]
        got = layers.loc[layer]
        assert got["holds_frac"] == pytest.approx(sum(mine["holds"]) / 3)
        assert got["rank_median"] == sorted(mine["context_rank"])[1]
        assert got["value_rank_median"] == sorted(mine["value_rank_min"])[1]
        assert got["span_distance_median"] == pytest.approx(sorted(mine["span_distance"])[1])
        assert got["span_distance_min"] == pytest.approx(min(mine["span_distance"]))
        assert got["n_contexts"] == T - 1
        assert (got["switched"], got["switched_sink"]) == (sum(mine["switched"]), sum(mine["switched_sink"]))
        assert got["agreement"] == pytest.approx(sum(mine["switched_sink"]) / sum(mine["switched"]))
    categories = result["categories"]
    assert list(categories["category"]) == list(CATEGORIES)
    listed = list(result["offenders"]["category"])
    assert list(categories["queries"]) == [listed.count(c) for c in CATEGORIES]
    assert list(categories["share"]) == pytest.approx([listed.count(c) / len(listed) for c in CATEGORIES])
    meta = result["meta"]
    assert meta["config"] == {"tau": 0.5, "delta": 0.6, "min_distance": 0.05, "rank_rtol": 1e-4, "bootstrap": 50,
                              "seed": 3}  # fmt: skip
    assert meta["model"] == {"name": "tiny-llama"} and meta["corpus"] == {"source": "hand-made ids"}
    assert 0 < meta["timings"]["seconds"] <= elapsed
    out = save_switch_assumptions(tmp_path / "sw", result)
    for name in ("cells", "layers", "conditioned", "offenders", "categories"):
        pd.testing.assert_frame_equal(pd.read_parquet(out / f"switch_{name}.parquet"), result[name])
    assert json.loads((out / "switch_assumptions.json").read_text()) == json.loads(json.dumps(meta))
    assert (out / "figures" / "switch_assumptions.png").read_bytes()[:4] == b"\x89PNG"
    assert page_settings(out / "report.html") == {
        "model": "tiny-llama", "corpus": "hand-made ids", "windows": "3", "tau": "0.5", "delta": "0.6",
        "min_distance": "0.05", "rank_rtol": "0.0001", "bootstrap": "50", "seed": "3",
        "seconds": f"{meta['timings']['seconds']:.1f}"}  # fmt: skip
    parts = page_parts(out / "report.html")
    assert parts["title"] == "sinkscope switch-assumptions: tiny-llama"
    assert parts["captions"] == ["Assumptions and agreement by layer"]
    assert parts["intro"].startswith("The switch theorem's assumptions (full-rank contexts, BOS outside their span)")
    assert parts["intro"].endswith("what the switched-off queries that are not hard sinks attend to. Definitions in "
                                   "docs/experiments.md.")  # fmt: skip
    assert parts["headings"][:3] == ["Agreement conditioned on the assumptions (switch_conditioned.parquet)",
                                     "Switched-off queries that are not hard sinks (switch_categories.parquet)",
                                     "Per layer (switch_layers.parquet)"]  # fmt: skip
    with pytest.raises(SinkscopeError):
        save_switch_assumptions(out, result)
    save_switch_assumptions(out, result, overwrite=True)


def test_conditioned_by_hand_with_its_bootstrap_as_a_loop():
    cells = pd.DataFrame({"window": [0, 0, 1, 1, 2, 2, 3, 3], "layer": [0, 1] * 4,
                          "holds": [True, False, True, True, False, False, True, False],
                          "switched": [4, 2, 3, 1, 5, 0, 2, 6], "switched_sink": [3, 1, 3, 0, 1, 0, 2, 3]})  # fmt: skip
    config = SwitchConfig(bootstrap=40, seed=7)
    table = conditioned(cells, config).set_index("cells")
    assert list(table.index) == ["assumptions hold", "assumptions fail", "all"]
    rng = np.random.default_rng(7)
    for name, rows in (("assumptions hold", [0, 2, 3, 6]), ("assumptions fail", [1, 4, 5, 7]),
                       ("all", list(range(8)))):  # fmt: skip
        s = [sum(int(cells["switched"][r]) for r in rows if cells["window"][r] == w) for w in range(4)]
        k = [sum(int(cells["switched_sink"][r]) for r in rows if cells["window"][r] == w) for w in range(4)]
        got = table.loc[name]
        assert (got["n_cells"], got["switched"], got["switched_sink"]) == (len(rows), sum(s), sum(k))
        assert got["agreement"] == pytest.approx(sum(k) / sum(s))
        draws = rng.integers(0, 4, size=(40, 4))
        boot = sorted(sum(k[w] for w in draw) / sum(s[w] for w in draw) for draw in draws if sum(s[w] for w in draw))
        assert (got["agreement_lo"], got["agreement_hi"]) == pytest.approx((np.quantile(boot, 0.025),
                                                                           np.quantile(boot, 0.975)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing switched off: NaN without computing 0/0
        none = conditioned(cells.assign(switched=0, switched_sink=0), config).set_index("cells")
    assert none[["agreement", "agreement_lo", "agreement_hi"]].isna().all().all()


def test_categories_at_their_cuts():
    assert categorize(0.5, 0.9, 0.9) == "near sink" and categorize(0.4999, 0.9, 0.0) == "self, small value"
    assert categorize(0.1, 0.5, 0.9) == "self, small value" and categorize(0.1, 0.4999, 0.5) == "other small-value key"
    assert categorize(0.1, 0.1, 0.4999) == "spread"


def test_switch_masks_by_hand():
    attn = torch.tensor([[1.0, 0, 0], [0.9, 0.1, 0], [0.2, 0.3, 0.5]], dtype=torch.float64)[None, None]
    values = torch.tensor([[0.0, 0], [3.0, 4.0], [1.0, 0.0]], dtype=torch.float64)[None, None]  # norms 0, 5, 1
    off, sink, scale = switch_masks(attn.expand(1, 2, 3, 3), values, 2, tau=0.2, delta=0.15)
    assert scale[0, 1].tolist() == pytest.approx([0.0, 2.5, 2.0])  # mean of the norms of keys j ≤ t
    # ||o_1|| = 0.1·5 = 0.5 ≤ 0.2·2.5; ||o_2|| = |(0.9 + 0.5, 1.2)| ≈ 1.84 > 0.4; ||o_0|| = 0 ≤ 0
    assert off[0, 1].tolist() == [True, True, False] and sink[0, 0].tolist() == [True, True, False]
    _, at_cut, _ = switch_masks(attn, values, 1, tau=0.2, delta=0.25)  # A[2,0] = 0.2; A[1,0] = 0.9; cut 0.75
    _, exact, _ = switch_masks(torch.tensor([[[[1.0, 0], [0.75, 0.25]]]], dtype=torch.float64), values[..., :2, :], 1,
                               tau=0.2, delta=0.25)  # fmt: skip
    assert at_cut[0, 0].tolist() == [True, True, False] and exact[0, 0].tolist() == [True, True]  # A[t,0] = 1 − δ


def test_layer_and_category_tables_of_hand_made_cells(monkeypatch):
    cells = pd.DataFrame({"window": [0, 0, 1, 1], "layer": [0, 1, 0, 1], "context_rank": [3, 2, 3, 3],
                          "n_contexts": [3] * 4, "span_distance": [0.5, 0.1, 0.3, 0.2],
                          "value_rank_min": [3, 1, 2, 3], "values_independent": [True, False, False, True],
                          "holds": [True, False, False, True], "switched": [2, 1, 0, 0],
                          "switched_sink": [1, 0, 0, 0], "sink": [3, 0, 1, 1], "queries": [12] * 4})  # fmt: skip
    offenders = pd.DataFrame([{"window": 0, "layer": 1, "head": 0, "t": 2, "token": 5, "a0": 0.1, "a_self": 0.8,
                               "top_key": 1, "top_mass": 0.1, "top_value_ratio": 0.5, "self_value_ratio": 0.1,
                               "category": "self, small value"}])  # fmt: skip
    monkeypatch.setattr(switch_assumptions, "measure", lambda lm, windows, config: (cells, offenders))
    result = run_switch_assumptions(SimpleNamespace(identity={}), [], SwitchConfig(bootstrap=10))
    layers = result["layers"].set_index("layer")
    assert layers["holds_frac"].tolist() == [0.5, 0.5] and layers["rank_median"].tolist() == [3, 2.5]
    assert layers["value_rank_median"].tolist() == [2.5, 2] and layers["span_distance_min"].tolist() == [0.3, 0.1]
    assert layers["span_distance_median"].tolist() == pytest.approx([0.4, 0.15])
    assert layers["agreement"].tolist() == [0.5, 0.0]  # one switched query, not a sink: 0 of 1, not missing
    assert result["categories"]["queries"].tolist() == [0, 1, 0, 0]
    assert result["categories"]["share"].tolist() == [0.0, 1.0, 0.0, 0.0]  # the one listed query is 100 %
    assert result["meta"]["corpus"] == {}
    monkeypatch.setattr(switch_assumptions, "measure", lambda lm, windows, config: (cells.assign(switched=0,
                        switched_sink=0), offenders.iloc[:0]))  # fmt: skip
    empty = run_switch_assumptions(SimpleNamespace(identity={}), [], SwitchConfig(bootstrap=10))
    assert empty["layers"]["agreement"].isna().all() and empty["categories"]["share"].tolist() == [0.0] * 4
