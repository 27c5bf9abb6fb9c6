"""The ablations' passes start at the first edited layer (`pipelines.loss_passes`: the layers below are replayed
from the clean pass, which runs once per section): every Δloss equals the one-pass-at-a-time computation written
here — a plain loop over head sets or draws, each a whole `transformers` forward with `o_proj`-input hooks of this
file and the cross-entropy by hand in float64 — to float32 tolerance, on tiny random-weight models from a config
(Llama with grouped-query attention, Gemma 3 with sliding layers, GPT-2's fused projections, Falcon's multi-query),
and the layers below the first edited one do run only in the clean pass."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
import torch

from sinkscope.models.families import attention_module
from sinkscope.pipelines.ablate import ablate
from sinkscope.reproduction.ablation_variants import ablation_variants, variant_arrays
from sinkscope.reproduction.sink_query import same_head_cells, sink_query_losses

from .test_reference_columns import V, tiny

FAMILIES = ["llama", "gemma3_text", "gpt2", "falcon"]
ATOL = 2e-5  # float32 logits, two cross-entropies subtracted


def windows(n: int = 5, T: int = 12) -> list[torch.Tensor]:
    """Batches of 2, 2, 1 windows (a short last batch), BOS = 1 first."""
    ids = torch.randint(2, V, (n, T), generator=torch.Generator().manual_seed(3))
    ids[:, 0] = 1
    return list(ids.split(2))


@contextmanager
def zeroed(lm, cells: dict[tuple[int, int], torch.Tensor | None]):
    """Head (l, h)'s dh columns of layer l's output-projection input set to 0 on the queries `cells` marks (B, T),
    or on every query when None."""
    dh, handles = lm.layout.head_dim, []
    for layer in sorted({layer for layer, _ in cells}):
        def pre_hook(_module, args, layer=layer):
            x = args[0].clone()
            for (lay, head), mask in cells.items():
                if lay == layer:
                    where = slice(None) if mask is None else mask
                    x[..., head * dh:(head + 1) * dh][where] = 0
            return (x, *args[1:])

        proj = getattr(attention_module(lm.family, lm.layers[layer]), lm.family.output_proj)
        handles.append(proj.register_forward_pre_hook(pre_hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def losses_by_hand(lm, ids: torch.Tensor) -> np.ndarray:
    """Mean next-token cross-entropy per window, a whole forward pass, −log softmax in float64."""
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits.double()
    picked = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    return (-picked).mean(1).numpy()


def delta_by_hand(lm, batches, cells_per_batch) -> np.ndarray:
    """Per window: loss with each batch's cells zeroed − clean loss, one whole pass per batch."""
    out = []
    for ids, cells in zip(batches, cells_per_batch):
        with zeroed(lm, cells):
            ablated = losses_by_hand(lm, ids)
        out.append(ablated - losses_by_hand(lm, ids))
    return np.concatenate(out)


@contextmanager
def counted(lm, layer: int):
    """Yield a list that grows by one each time decoder layer `layer` computes (its attention module runs)."""
    runs: list[int] = []
    module = attention_module(lm.family, lm.layers[layer])
    handle = module.register_forward_pre_hook(lambda _m, _a: runs.append(1))
    try:
        yield runs
    finally:
        handle.remove()


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("mode", ["zero", "bos"])
def test_head_sets_equal_whole_passes_and_skip_the_layers_below(name, mode):
    lm = tiny(name)
    batches = windows()
    sets = {"deep": [(2, 1), (2, 3)], "middle": [(1, 0), (2, 2)], "first": [(0, 3), (2, 0)]}
    with counted(lm, 0) as layer0, counted(lm, 1) as layer1:
        frame = ablate(lm, batches, sets, mode=mode).set_index("set")
    # the clean pass runs every layer once per batch; then "first" runs layers 0 and 1, "middle" layer 1 only
    assert (len(layer0), len(layer1)) == (3 + 3, 3 + 3 + 3)
    for set_name, heads in sets.items():
        if mode == "zero":
            expected = delta_by_hand(lm, batches, [dict.fromkeys(heads)] * len(batches))
        else:  # all attention on BOS: the head outputs v_0 (its kv group's value at position 0) on every query
            expected = np.concatenate([bos_delta_by_hand(lm, ids, heads) for ids in batches])
        np.testing.assert_allclose(frame.loc[set_name, "window_delta"], expected, atol=ATOL, rtol=0)


def bos_delta_by_hand(lm, ids: torch.Tensor, heads) -> np.ndarray:
    """Each head's output slice replaced by its output at query 0 (where attention is all on BOS, o_0 = v_0)."""
    dh, handles = lm.layout.head_dim, []
    for layer in sorted({layer for layer, _ in heads}):
        def pre_hook(_module, args, layer=layer):
            x = args[0].clone()
            for lay, head in heads:
                if lay == layer:
                    x[..., head * dh:(head + 1) * dh] = args[0][:, :1, head * dh:(head + 1) * dh]
            return (x, *args[1:])

        proj = getattr(attention_module(lm.family, lm.layers[layer]), lm.family.output_proj)
        handles.append(proj.register_forward_pre_hook(pre_hook))
    try:
        ablated = losses_by_hand(lm, ids)
    finally:
        for handle in handles:
            handle.remove()
    return ablated - losses_by_hand(lm, ids)


def eager_sink_cells(lm, ids: torch.Tensor, heads, delta: float) -> dict:
    """{head: A[t, 0] ≥ 1 − δ, t ≥ 1} (B, T) from `output_attentions` of the eager model."""
    previous = lm.model.config._attn_implementation
    lm.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = lm.model(input_ids=ids, output_attentions=True).attentions
    finally:
        lm.model.set_attn_implementation(previous)
    cells = {}
    for layer, head in heads:
        mask = attentions[layer][:, head, :, 0] >= 1 - delta
        mask[:, 0] = False
        cells[(layer, head)] = mask
    return cells


@pytest.mark.parametrize("name", FAMILIES)
def test_sink_queries_and_their_controls_equal_whole_passes(name):
    from sinkscope.pipelines.query_ablation import matched_random_cells

    lm = tiny(name)
    batches = windows()
    heads, delta, draws, seed = [(1, 1), (2, 0), (2, 3)], 0.7, 2, 4
    out = sink_query_losses(lm, batches, heads, draws, seed, delta=delta)
    selected = [eager_sink_cells(lm, ids, heads, delta) for ids in batches]
    assert sum(int(m.sum()) for cells in selected for m in cells.values()) > 0  # some sink queries to zero
    np.testing.assert_allclose(out["selected"], delta_by_hand(lm, batches, selected), atol=ATOL, rtol=0)
    # the controls' cells drawn in the section's order (same heads, then random), the losses by hand
    rng = np.random.default_rng(seed)
    same = [[same_head_cells(cells, rng) for cells in selected] for _ in range(draws)]
    random = [[matched_random_cells(cells, len(lm.layers), lm.layout.n_heads, rng) for cells in selected]
              for _ in range(draws)]  # fmt: skip
    for name_, per_draw in (("same_heads", same), ("random", random)):
        expected = np.stack([delta_by_hand(lm, batches, draw) for draw in per_draw], 1)
        np.testing.assert_allclose(out[name_], expected, atol=ATOL, rtol=0)


def test_the_sensitivity_variants_equal_whole_passes():
    """One clean pass and one eager pass serve every variant: the sink variants' chosen sets and the dormant
    variants' sets still equal whole passes."""
    from sinkscope.pipelines.head_selection import random_heads
    from sinkscope.reproduction.matched_heads import layer_matched_sets

    lm = tiny("llama")
    batches = windows()
    heads = [(layer, head) for layer in range(3) for head in range(4)]
    scores = pd.DataFrame({"layer": [h[0] for h in heads], "head": [h[1] for h in heads],
                           "ahon_ln": np.linspace(0.9, 0.1, 12), "hard_sink_frac": np.linspace(0.1, 0.9, 12)})  # fmt: skip
    arrays = ablation_variants(lm, batches, scores, fraction=0.25, delta=0.4, draws=2, seed=0)
    # 12 heads × 25 % × 2 = 6: the 6 most hard-sink heads (the last six), δ = 0.4; the dormant set: the same six
    top6 = heads[6:]
    sink = variant_arrays(arrays, "sink_ablation")[("head_fraction", 2.0)]
    cells = [eager_sink_cells(lm, ids, top6, 0.4) for ids in batches]
    np.testing.assert_allclose(sink["selected"], delta_by_hand(lm, batches, cells), atol=ATOL, rtol=0)
    dormant = variant_arrays(arrays, "dormant_heads")[("head_fraction", 2.0)]
    whole = [dict.fromkeys(top6)] * len(batches)
    np.testing.assert_allclose(dormant["selected"], delta_by_hand(lm, batches, whole), atol=ATOL, rtol=0)
    for draw in range(2):
        randoms = [dict.fromkeys(random_heads(3, 4, 6, draw))] * len(batches)
        np.testing.assert_allclose(dormant["random"][:, draw], delta_by_hand(lm, batches, randoms), atol=ATOL, rtol=0)
    for draw, matched in enumerate(layer_matched_sets(top6, 4, 2, 0)):
        np.testing.assert_allclose(dormant["layer_matched"][:, draw],
                                   delta_by_hand(lm, batches, [dict.fromkeys(matched)] * len(batches)),
                                   atol=ATOL, rtol=0)  # fmt: skip
