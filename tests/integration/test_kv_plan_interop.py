"""A plan folder read back the way DuoAttention's `load_attn_pattern` reads it (np.loadtxt, tab delimiter, clipped to
[0, 1]; sink_size and recent_size from config.json): shape and order against the KV-head layout of a GQA and a
multi-head tiny Llama config, the expected plan worked out by hand from the query heads' scores."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from transformers import LlamaConfig

from sinkscope.pipelines.kv_plan import (
    PlanConfig,
    full_heads,
    head_scores,
    kv_head_count,
    need_order,
    plan_values,
    write_plan,
)

LAYERS, HEADS = 3, 4


def _heads_table(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = [{"layer": layer, "head": head, "sink_score": rng.uniform(0, 0.6), "diag_score": rng.uniform(0, 0.3),
             "prev_score": rng.uniform(0, 0.3), "entropy": rng.uniform(), "head_class": "mixed"}
            for layer in range(LAYERS) for head in range(HEADS)]  # fmt: skip
    return pd.DataFrame(rows).sample(frac=1, random_state=seed)  # row order must not matter


@pytest.mark.parametrize("kv_heads", [2, 4], ids=["gqa", "multi-head"])
def test_plan_reads_back_as_duoattention_reads_it(tmp_path, kv_heads):
    config = LlamaConfig(num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=kv_heads,
                         hidden_size=32)  # fmt: skip
    L, KV, group = kv_head_count(config)
    assert (L, KV, group) == (LAYERS, kv_heads, HEADS // kv_heads)
    heads = _heads_table(kv_heads)
    plan = PlanConfig(share=0.5, sink_size=2, recent_size=8)
    scores = head_scores(heads, np.zeros((LAYERS, HEADS)), group, plan)
    order = need_order(scores)
    values = plan_values(order, full_heads(order, L, KV, plan.share))
    write_plan(tmp_path / "plan", values, scores, plan, {"model": {"name": "tiny"}})

    loaded = np.clip(np.loadtxt(tmp_path / "plan" / "full_attention_heads.tsv", dtype=float, delimiter="\t"), 0, 1)
    settings = json.loads((tmp_path / "plan" / "config.json").read_text())
    assert (settings["sink_size"], settings["recent_size"]) == (2, 8)
    assert loaded.shape == (LAYERS, kv_heads)

    # By hand: KV head k of layer l serves query heads k·group .. (k+1)·group − 1 and keeps, at worst, the least
    # share sink + diag + prev among them; the half of the KV heads with the least kept share stays full.
    need = np.zeros((LAYERS, kv_heads))
    by_head = heads.set_index(["layer", "head"])
    for layer in range(LAYERS):
        for k in range(kv_heads):
            kept = [min(1.0, by_head.loc[(layer, h), ["sink_score", "diag_score", "prev_score"]].sum())
                    for h in range(k * group, (k + 1) * group)]  # fmt: skip
            need[layer, k] = 1 - min(kept)
    n_full = round(0.5 * LAYERS * kv_heads)
    expected_full = need >= np.sort(need, axis=None)[-n_full]
    np.testing.assert_array_equal(loaded > 0.5, expected_full)
    np.testing.assert_array_equal(np.argsort(-loaded, axis=None), np.argsort(-need, axis=None))
    table = pd.read_parquet(tmp_path / "plan" / "kv_plan_heads.parquet")
    assert table["reason"].str.startswith("full").sum() == n_full
    assert sorted(table["query_heads"]) == sorted(",".join(str(k * group + i) for i in range(group))
                                                  for _ in range(LAYERS) for k in range(kv_heads))  # fmt: skip
