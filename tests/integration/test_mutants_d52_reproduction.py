"""Draw 52 (issue 34) in reproduction/: every column the layer-matched control writes into the ablation table
(`matched_heads.layer_matched_ablation`): one row per draw, set name, heads (those of `layer_matched_sets`, drawn
here again with the same seed), selection label, the chosen set's fraction, seed = draw index, and each draw's
Δloss against zeroing the same heads' o_proj slices by hand on plain transformers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from sinkscope.reproduction.matched_heads import LAYER_MATCHED, layer_matched_ablation, layer_matched_sets

from .test_capture_families import build, token_windows
from .test_gaps_query_ablation import losses_with_zeroed_cells


def test_layer_matched_rows_column_by_column():
    lm = build("llama")
    ids = token_windows(3)
    chosen = [(0, 1), (2, 0), (2, 3)]
    curve = pd.DataFrame({"selection": ["other", "lowest-ahon-ln"], "heads": ["1.1", "0.1,2.0,2.3"],
                          "fraction": [0.5, 0.25]})  # fmt: skip
    table = layer_matched_ablation(lm, [ids[:2], ids[2:]], curve, "lowest-ahon-ln", n_draws=3, seed=7)
    draws = layer_matched_sets(chosen, lm.layout.n_heads, 3, 7)
    assert len(table) == 3
    assert table["set"].tolist() == [f"{LAYER_MATCHED} {k}" for k in range(3)]
    assert table["selection"].tolist() == [LAYER_MATCHED] * 3 and LAYER_MATCHED == "layer-matched random"
    assert table["fraction"].tolist() == [0.25] * 3
    assert table["seed"].tolist() == [0, 1, 2]
    assert table["mode"].tolist() == ["zero"] * 3 and table["n_heads"].tolist() == [3] * 3
    assert table["heads"].tolist() == [",".join(f"{l}.{h}" for l, h in heads) for heads in draws]
    base = np.concatenate([losses_with_zeroed_cells(lm, ids, {})])
    for row, heads in zip(table.itertuples(), draws):
        assert sorted(layer for layer, _ in heads) == [0, 2, 2]  # the chosen set's per-layer counts
        every = {head: torch.ones(ids.shape, dtype=torch.bool) for head in heads}
        delta = losses_with_zeroed_cells(lm, ids, every) - base
        np.testing.assert_allclose(row.delta_loss, delta.mean(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.asarray(row.window_delta, float), delta, rtol=1e-4, atol=1e-6)
