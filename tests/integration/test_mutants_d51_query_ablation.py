"""Draw 51 (issue 34) in the sink-query ablation (`pipelines.query_ablation.sink_query_ablation`,
`reproduction.sink_query.sink_query_losses`): the documented default δ = 0.1 of both, read from the cells they zero
(counted here from plain transformers' eager maps, A[t,0] ≥ 0.9, t ≥ 1), and the one-window table that has no
spread: its SEM is NaN without numpy's "degrees of freedom" warning (the std of one value is never taken)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from sinkscope.pipelines.query_ablation import sink_query_ablation
from sinkscope.reproduction.sink_query import sink_query_losses

from .test_capture_families import build, token_windows
from .test_gaps_query_ablation import losses_with_zeroed_cells

HEADS = [(0, 1), (1, 2), (2, 0), (2, 3)]


def sink_counts(lm, ids: torch.Tensor, delta: float) -> np.ndarray:
    """Per window, the (head, query) pairs with A[t,0] ≥ 1 − δ, t ≥ 1, over HEADS (plain eager maps)."""
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = lm.model.model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    return sum((maps[layer][:, head, 1:, 0] >= 1 - delta).sum(1).numpy() for layer, head in HEADS)


def test_the_default_delta_is_one_tenth_in_both_sink_query_passes():
    lm = build("llama")
    ids = token_windows(4)
    expected = sink_counts(lm, ids, 0.1)
    every = len(HEADS) * (ids.shape[1] - 1)
    # the default's cells are neither none nor all queries, and differ from δ = 0.05 and δ = 0.2 (fixture check)
    assert 0 < expected.sum() < every * len(ids)
    assert sink_counts(lm, ids, 0.05).sum() < expected.sum() < sink_counts(lm, ids, 0.2).sum()
    table = sink_query_ablation(lm, [ids[:2], ids[2:]], HEADS, n_random=1, seed=0)
    assert list(table["n_cells"]) == [int(expected.sum())] * 2
    arrays = sink_query_losses(lm, [ids[:2], ids[2:]], HEADS, n_draws=1, seed=0)
    np.testing.assert_array_equal(arrays["cells_selected"], expected.astype(float))


def test_one_window_has_a_nan_sem_without_a_degrees_of_freedom_warning():
    lm = build("llama")
    ids = token_windows(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        table = sink_query_ablation(lm, [ids], HEADS, n_random=1, seed=0, delta=0.3)
    assert table["delta_sem"].isna().all() and list(table["n_windows"]) == [1, 1]
    # two windows: the SEM is |d1 − d2| / 2 (the std with ddof = 1 of two values is |d1 − d2| / √2)
    ids = token_windows(2)
    two = sink_query_ablation(lm, [ids], HEADS, n_random=1, seed=0, delta=0.3)
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = lm.model.model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    cells = {(layer, head): maps[layer][:, head, :, 0] >= 0.7 for layer, head in HEADS}
    for mask in cells.values():
        mask[:, 0] = False
    d1, d2 = losses_with_zeroed_cells(lm, ids, cells) - losses_with_zeroed_cells(lm, ids, {})
    row = two.set_index("set").loc["sink queries"]
    assert row["n_windows"] == 2 and abs(d1 - d2) > 1e-5
    assert row["delta_sem"] == pytest.approx(abs(d1 - d2) / 2, rel=1e-3, abs=1e-7)
