"""Sink-query ablation: switch heads off only on the queries where they sink, against matched random sets.

Zeroing a head on every query (`pipelines.ablate`, mode `zero`) also removes what it does where it does *not*
sink. The paper's claim is about the queries where a head sinks: there its output is (nearly) `v_0`, and a hard
switch would set it to 0. So here a head's slice of the output projection's input (`o_t`, SPEC §3) is set to 0
only on its *sink queries*, `A[t,0] ≥ 1 − δ` (t ≥ 1), read from the clean model's eager attention of the same
window. The control is a matched random set: as many random heads, each zeroed on as many random queries
(t ≥ 1) of each window as its counterpart sinks on; every draw is a new random set, so the spread over draws is
the control's own noise. Loss is the mean next-token cross-entropy per window (`pipelines.loss_passes.window_losses`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.capture.head_ablation import Head
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.loss_passes import window_losses

Cells = dict[Head, Tensor]  # head → (B, T) booleans: the queries of one batch where the head is zeroed


@torch.no_grad()
def sink_columns(lm: LoadedModel, ids: Tensor) -> list[Tensor]:
    """Per layer, `A[:, h, t, 0]` (B, H, T): every head's attention on position 0, from the model's eager attention
    of one batch (no hooks)."""
    previous = lm.model.config._attn_implementation
    try:
        lm.model.set_attn_implementation("eager")
        attentions = lm.base(input_ids=ids.to(lm.device), use_cache=False, output_attentions=True).attentions
    finally:
        lm.model.set_attn_implementation(previous)
    if attentions is None:
        raise SinkscopeError("the model returned no attention maps with eager attention; cannot find sink queries")
    return [attention[..., 0] for attention in attentions]


def cells_at(columns: Sequence[Tensor], heads: Sequence[Head], delta: float) -> Cells:
    """`{head: A[t,0] ≥ 1 − δ for t ≥ 1}` (B, T) from one batch's `sink_columns`."""
    cells = {}
    for layer, head in heads:
        mask = columns[layer][:, head] >= 1 - delta  # (B, T)
        mask[:, 0] = False
        cells[(layer, head)] = mask.cpu()
    return cells


def sink_query_cells(lm: LoadedModel, ids: Tensor, heads: Sequence[Head], delta: float) -> Cells:
    """`{head: A[t,0] ≥ 1 − δ for t ≥ 1}` (B, T) of one batch, from the model's eager attention (no hooks)."""
    return cells_at(sink_columns(lm, ids), heads, delta)


def first_zeroed_layer(cells: Cells) -> int:
    """The lowest layer with a zeroed query in `cells` (0 when none: `pipelines.loss_passes.replayed_below`)."""
    return min((layer for (layer, _), mask in cells.items() if bool(mask.any())), default=0)


def matched_random_cells(cells: Cells, n_layers: int, n_heads: int, rng: np.random.Generator) -> Cells:
    """As many random heads as `cells` has (without replacement), each zeroed on as many random queries t ≥ 1 of
    each window as its counterpart (heads paired in sorted order)."""
    flat = rng.choice(n_layers * n_heads, size=len(cells), replace=False)
    random_heads = sorted((int(i // n_heads), int(i % n_heads)) for i in flat)
    out = {}
    for head, (_, mask) in zip(random_heads, sorted(cells.items())):
        B, T = mask.shape
        chosen = torch.zeros(B, T, dtype=torch.bool)
        for b in range(B):
            count = int(mask[b].sum())
            chosen[b, 1 + rng.choice(T - 1, size=count, replace=False)] = True
        out[head] = chosen
    return out


@contextmanager
def query_ablation(lm: LoadedModel, current: dict[str, Cells]) -> Iterator[None]:
    """Inside the block, head (l, h)'s output slice is 0 on the queries `current["cells"][(l, h)]` (B, T) marks;
    the caller sets `current["cells"]` before each batch. Pre-hooks on every layer's output projection, removed
    in `finally`."""
    layout, handles = lm.layout, []

    def hook(layer: int):
        def pre_hook(_module, args):
            by_head = {h: m for (l, h), m in current["cells"].items() if l == layer}
            if not by_head:
                return None
            heads_out = args[0].clone()
            B, T = heads_out.shape[:2]
            per_head = heads_out.view(B, T, layout.n_heads, layout.head_dim)
            for head, mask in by_head.items():
                per_head[:, :, head][mask.to(heads_out.device)] = 0.0
            return (heads_out, *args[1:])

        return pre_hook

    try:
        for layer, block in enumerate(lm.layers):
            module = getattr(attention_module(lm.family, block), lm.family.output_proj)
            handles.append(module.register_forward_pre_hook(hook(layer)))
        yield
    finally:
        for handle in handles:
            handle.remove()


def sink_query_ablation(lm: LoadedModel, batches: Sequence[Tensor], heads: Sequence[Head], n_random: int, seed: int,
                        delta: float = 0.1) -> pd.DataFrame:  # fmt: skip
    """Loss change of zeroing `heads` on their sink queries, and of `n_random` matched random head-and-query sets.

    One row per set: `set` ("sink queries" or "random k"), `n_heads`, `n_cells` (zeroed (head, query) pairs
    over all windows), `base_loss`, `delta_loss` (mean over windows of loss − clean loss, nats/token),
    `delta_sem`, `n_windows`.
    """
    if not heads:
        raise SinkscopeError("sink-query ablation needs at least one head")
    base = window_losses(lm, batches)
    selected = [sink_query_cells(lm, ids, heads, delta) for ids in batches]
    n_layers, n_heads = len(lm.layers), lm.layout.n_heads
    sets: dict[str, list[Cells]] = {"sink queries": selected}
    rng = np.random.default_rng(seed)
    for draw in range(n_random):
        sets[f"random {draw}"] = [matched_random_cells(cells, n_layers, n_heads, rng) for cells in selected]
    rows = []
    current: dict[str, Cells] = {"cells": {}}
    with query_ablation(lm, current):
        for name, per_batch in sets.items():
            losses = []
            for ids, cells in zip(batches, per_batch):
                current["cells"] = cells
                losses.append(window_losses(lm, [ids]))
            current["cells"] = {}
            diff = np.concatenate(losses) - base
            n_cells = sum(int(m.sum()) for cells in per_batch for m in cells.values())
            rows.append({"set": name, "n_heads": len(heads), "n_cells": n_cells, "base_loss": float(base.mean()),
                         "delta_loss": float(diff.mean()),
                         "delta_sem": float(diff.std(ddof=1) / np.sqrt(diff.size)) if diff.size > 1 else float("nan"),
                         "n_windows": int(diff.size)})  # fmt: skip
    return pd.DataFrame(rows)

