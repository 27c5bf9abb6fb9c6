"""Sink-query ablation (`pipelines.query_ablation`) on a tiny random Llama: the masks are the eager attention's
sink queries, a full mask equals zeroing the head (`capture.head_ablation.head_ablation`), an empty one changes
nothing, a partial one only changes positions from the first zeroed query on, and the random sets match."""

import numpy as np
import torch

from sinkscope.capture.head_ablation import head_ablation
from sinkscope.pipelines.ablate import window_losses
from sinkscope.pipelines.query_ablation import (
    matched_random_cells,
    query_ablation,
    sink_query_ablation,
    sink_query_cells,
)

from .test_capture_families import build, token_windows

DELTA = 0.5


def test_sink_query_cells_are_the_eager_sink_queries():
    lm = build("llama")
    ids = token_windows(4)
    cells = sink_query_cells(lm, ids, [(1, 2), (2, 0)], DELTA)
    lm.model.set_attn_implementation("eager")
    att = lm.base(input_ids=ids, output_attentions=True).attentions
    for (layer, head), mask in cells.items():
        expected = att[layer][:, head, :, 0] >= 1 - DELTA
        expected[:, 0] = False
        assert torch.equal(mask, expected)
    assert sum(int(m.sum()) for m in cells.values()) > 0


def test_masks_zero_exactly_their_queries():
    lm = build("llama")
    ids = token_windows(3)
    head = (1, 2)
    current = {"cells": {head: torch.ones(3, ids.shape[1], dtype=torch.bool)}}
    with query_ablation(lm, current):
        full = window_losses(lm, [ids])
    with head_ablation(lm, [head], "zero"):
        zeroed = window_losses(lm, [ids])
    np.testing.assert_allclose(full, zeroed, rtol=1e-6)
    base_logits = lm.model(input_ids=ids).logits
    current["cells"] = {head: torch.zeros(3, ids.shape[1], dtype=torch.bool)}
    with query_ablation(lm, current):
        torch.testing.assert_close(lm.model(input_ids=ids).logits, base_logits)
        mask = torch.zeros(3, ids.shape[1], dtype=torch.bool)
        mask[:, 5] = True
        current["cells"] = {head: mask}
        logits = lm.model(input_ids=ids).logits
    torch.testing.assert_close(logits[:, :5], base_logits[:, :5])  # causal: nothing before query 5 changes
    assert not torch.allclose(logits[:, 5], base_logits[:, 5])


def test_matched_random_sets_and_the_table():
    g = torch.Generator().manual_seed(0)
    cells = {(0, 1): torch.rand(4, 12, generator=g) > 0.5, (2, 3): torch.rand(4, 12, generator=g) > 0.7}
    for cell in cells.values():
        cell[:, 0] = False
    random = matched_random_cells(cells, 3, 4, np.random.default_rng(1))
    assert len(random) == 2 and all(0 <= layer < 3 and 0 <= head < 4 for layer, head in random)
    counts = sorted(tuple(m.sum(1).tolist()) for m in random.values())
    assert counts == sorted(tuple(m.sum(1).tolist()) for m in cells.values())
    assert not any(m[:, 0].any() for m in random.values())

    lm = build("llama")
    batches = [token_windows(4)[:2], token_windows(4)[2:]]
    table = sink_query_ablation(lm, batches, [(1, 2), (2, 0)], n_random=3, seed=0, delta=DELTA)
    assert list(table["set"]) == ["sink queries", "random 0", "random 1", "random 2"]
    assert table["n_cells"].nunique() == 1 and table["n_cells"].iloc[0] > 0 and set(table["n_windows"]) == {4}
