"""The sink-query ablation with both of its controls, per window (for a windows × draws bootstrap).

The most hard-sink heads are zeroed only on their sink queries (`pipelines.query_ablation`). Two controls,
`n_draws` draws each:

- **same heads**: each head zeroed on as many of its *non-sink* queries t ≥ 1 per window as it sinks on (all of
  them when it has fewer), so head identity is held fixed and only the query type changes;
- **random**: matched random head-and-query sets (`pipelines.query_ablation.matched_random_cells`).

Loss is the mean next-token cross-entropy per window (`pipelines.loss_passes.window_losses`); each window's pass
starts at the first layer with a zeroed query, the layers below replayed from the clean pass
(`pipelines.loss_passes.replayed_below`: the same losses as the whole pass).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.loss_passes import CleanPass
from sinkscope.reproduction.config import SINK_QUERY_DELTA

Cells = dict[tuple[int, int], Tensor]


def same_head_cells(cells: Cells, rng: np.random.Generator) -> Cells:
    """The same heads, each zeroed on min(k, m) random non-sink queries t ≥ 1 of each window, where k is its sink
    queries there and m its non-sink ones."""
    out = {}
    for head, mask in sorted(cells.items()):
        B, T = mask.shape
        chosen = torch.zeros(B, T, dtype=torch.bool)
        for b in range(B):
            free = np.flatnonzero(~mask[b, 1:].numpy()) + 1
            count = min(int(mask[b].sum()), free.size)
            chosen[b, rng.choice(free, size=count, replace=False)] = True
        out[head] = chosen
    return out


def sink_query_losses(lm: LoadedModel, batches: Sequence[Tensor], heads: Sequence[tuple[int, int]], n_draws: int,
                      seed: int, delta: float = SINK_QUERY_DELTA, clean: CleanPass | None = None,
                      columns: Sequence[list[Tensor]] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """Per-window Δloss (nats/token): `selected` (W,), `same_heads` (W, n_draws), `random` (W, n_draws); `base`
    (W,) the clean losses; `cells_selected`, `cells_same_heads` (W,) the zeroed (head, query) pairs per window
    (the same-heads control mean over draws). `clean` (`pipelines.loss_passes.clean_pass`) and `columns` (per
    batch, `pipelines.query_ablation.sink_columns`) of the same batches, when given, are not computed again."""
    from sinkscope.pipelines.loss_passes import clean_pass, replayed_below, window_losses
    from sinkscope.pipelines.query_ablation import (
        cells_at,
        first_zeroed_layer,
        matched_random_cells,
        query_ablation,
        sink_columns,
    )

    clean = clean_pass(lm, batches) if clean is None else clean
    columns = [sink_columns(lm, ids) for ids in batches] if columns is None else columns
    base = clean.losses
    selected = [cells_at(batch_columns, heads, delta) for batch_columns in columns]
    n_layers, n_heads = len(lm.layers), lm.layout.n_heads
    rng = np.random.default_rng(seed)
    same = [[same_head_cells(cells, rng) for cells in selected] for _ in range(n_draws)]
    random = [[matched_random_cells(cells, n_layers, n_heads, rng) for cells in selected] for _ in range(n_draws)]
    current: dict[str, Cells] = {"cells": {}}

    def losses(per_batch: list[Cells]) -> np.ndarray:
        out = []
        for index, (ids, cells) in enumerate(zip(batches, per_batch)):
            current["cells"] = cells
            with replayed_below(lm, clean.of_batch(index), first_zeroed_layer(cells)):
                out.append(window_losses(lm, [ids]))
        current["cells"] = {}
        return np.concatenate(out) - base

    def cells_per_window(per_batch: list[Cells]) -> np.ndarray:
        return np.concatenate([sum(m.sum(1) for m in cells.values()).numpy() for cells in per_batch]).astype(float)

    with query_ablation(lm, current):
        chosen = losses(selected)
        same_heads = np.stack([losses(draw) for draw in same], 1)
        randoms = np.stack([losses(draw) for draw in random], 1)
    return {"selected": chosen, "same_heads": same_heads, "random": randoms, "base": base,
            "cells_selected": cells_per_window(selected),
            "cells_same_heads": np.mean([cells_per_window(draw) for draw in same], 0)}  # fmt: skip
