"""Gaps of issue 34 in the sink-query ablation's table (`pipelines.query_ablation.sink_query_ablation`): its
"sink queries" row is recomputed here from the model's own eager maps (cells `A[t,0] ≥ 1 − δ`, t ≥ 1, at δ = 0.3)
and a forward pass whose heads are zeroed by a pre-hook written here, with the cross-entropy taken by hand; the
random rows are matched in size; one window has no spread; no head is refused in one line."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.query_ablation import sink_query_ablation

from .test_capture_families import build, token_windows

DELTA, HEADS = 0.3, [(1, 2), (2, 0)]


@torch.no_grad()
def losses_with_zeroed_cells(lm, ids: torch.Tensor, cells: dict) -> np.ndarray:
    """Per-window mean next-token cross-entropy with head h's slice of o_proj's input zeroed on its cells."""
    H, dh = lm.layout.n_heads, lm.layout.head_dim
    handles = []
    for layer, block in enumerate(lm.model.model.layers):
        mine = {h: m for (l, h), m in cells.items() if l == layer}

        def pre_hook(_module, args, mine=mine):
            x = args[0].clone().view(*args[0].shape[:2], H, dh)
            for h, mask in mine.items():
                x[:, :, h][mask] = 0.0
            return (x.flatten(-2),)

        handles.append(block.self_attn.o_proj.register_forward_pre_hook(pre_hook))
    try:
        logits = lm.model(input_ids=ids, use_cache=False).logits.double()
    finally:
        for handle in handles:
            handle.remove()
    ce = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")  # (B, T-1)
    return ce.mean(1).numpy()


def test_the_sink_row_is_the_loss_change_of_its_own_cells():
    lm = build("llama")
    ids = token_windows(5)
    batches = [ids[:3], ids[3:]]
    table = sink_query_ablation(lm, batches, HEADS, n_random=2, seed=3, delta=DELTA)
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = lm.model.model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    cells = {}
    for layer, head in HEADS:
        mask = maps[layer][:, head, :, 0] >= 1 - DELTA
        mask[:, 0] = False
        cells[(layer, head)] = mask
    base = losses_with_zeroed_cells(lm, ids, {})
    diff = losses_with_zeroed_cells(lm, ids, cells) - base
    row = table.set_index("set").loc["sink queries"]
    n_cells = sum(int(m.sum()) for m in cells.values())
    assert 0 < n_cells < sum(m[:, 1:].numel() for m in cells.values())
    assert row["n_cells"] == n_cells and row["n_heads"] == 2 and row["n_windows"] == 5
    assert row["base_loss"] == pytest.approx(base.mean(), rel=1e-5)
    assert row["delta_loss"] == pytest.approx(diff.mean(), rel=1e-4, abs=1e-6) and abs(diff.mean()) > 1e-4
    assert row["delta_sem"] == pytest.approx(diff.std(ddof=1) / math.sqrt(5), rel=1e-3, abs=1e-7)
    random = table[table["set"] != "sink queries"]
    assert list(random["set"]) == ["random 0", "random 1"] and set(random["n_cells"]) == {n_cells}
    assert (random["delta_loss"] != row["delta_loss"]).all()


def test_one_window_has_no_spread_and_no_head_is_refused():
    lm = build("llama")
    ids = token_windows(1)
    table = sink_query_ablation(lm, [ids], HEADS, n_random=1, seed=0, delta=DELTA)
    assert table["delta_sem"].isna().all() and set(table["n_windows"]) == {1}
    with pytest.raises(SinkscopeError) as err:
        sink_query_ablation(lm, [ids], [], n_random=1, seed=0)
    assert str(err.value) == "sink-query ablation needs at least one head"
