"""Gaps of issue 34 in the family table: every family through every API that slices its weights or its heads'
outputs — `query_key_maps` and `value_output_maps` (the multi-query Falcons included, with ALiBi switched off so
that the logits are the bilinear form alone), `head_ablation` ("zero" and "bos") and the sink-query ablation
(`pipelines.query_ablation`) — each checked against what the model's own modules compute (hooks on the output
projection's input and on the eager attention function's values), never against sinkscope's slicing."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from sinkscope.capture.head_ablation import head_ablation
from sinkscope.models.families import attention_module
from sinkscope.pipelines.query_ablation import query_ablation, sink_query_cells

from . import test_capture_more_families as more

# One multi-query Falcon with rotary positions (one kv head for all query heads), beside the ALiBi one.
FALCON_MQA = (tf.FalconForCausalLM, lambda: tf.FalconConfig(**more.FALCON, multi_query=True, alibi=False,
                                                            new_decoder_architecture=False))  # fmt: skip
NAMES = [*more.MODELS, "falcon_multi_query"]
# Head 1 of the last layer: with 2 kv heads of 4 it reads kv head 0 (h // group), where h mod KV = 1 would differ
# (for the last head both give KV − 1).
HEAD = (1, 1)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(more.MODELS, "falcon_multi_query", FALCON_MQA)
    original = more.tiny

    def build(name: str):
        lm = original(name)
        if getattr(lm.model.base_model, "use_alibi", False):  # ALiBi adds j-dependent logits: off for the maps
            lm.model.base_model.use_alibi = False
        return lm

    return build


@pytest.mark.parametrize("name", ["falcon_alibi", "falcon_multi_query"])
def test_weight_maps_of_the_multi_query_falcons(name, tiny, monkeypatch):
    """The weight-map test of the other families, on the variants it left out (one kv head shared by all)."""
    monkeypatch.setattr(more, "tiny", tiny)
    assert tiny(name).layout.n_kv_heads == 1
    more.test_weight_maps_equal_the_models_logits_and_outputs(name)


def output_projection_input(lm, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """The input of layer `layer`'s output projection (B, T, H·dh), float64, read by a pre-hook."""
    seen = {}
    proj = getattr(attention_module(lm.family, lm.layers[layer]), lm.family.output_proj)
    handle = proj.register_forward_pre_hook(lambda _m, args: seen.__setitem__("o", args[0].double()))
    try:
        with torch.no_grad():
            lm.base(input_ids=ids, use_cache=False)
    finally:
        handle.remove()
    return seen["o"]


@pytest.mark.parametrize("name", NAMES)
def test_every_family_through_both_ablations(name, tiny):
    """`head_ablation` "zero" zeroes exactly head 1's slice; "bos" writes its kv head's `v_0` there; the sink-query
    ablation zeroes that slice only on the marked queries. Every other entry keeps the clean model's value."""
    lm = tiny(name)
    layout, ids = lm.layout, more.token_windows()[:2]
    layer, head = HEAD
    lm.model.set_attn_implementation("eager")
    values: dict = {}
    with more.recorded_values(lm.model, values):
        clean = output_projection_input(lm, ids, layer).unflatten(-1, (layout.n_heads, layout.head_dim))
    others = [h for h in range(layout.n_heads) if h != head]
    with head_ablation(lm, [HEAD], "zero"):
        zero = output_projection_input(lm, ids, layer).unflatten(-1, (layout.n_heads, layout.head_dim))
    assert torch.count_nonzero(zero[:, :, head]) == 0 and torch.count_nonzero(clean[:, :, head]) > 0
    torch.testing.assert_close(zero[:, :, others], clean[:, :, others])  # same layer: earlier layers unchanged
    with head_ablation(lm, [HEAD], "bos"):
        bos = output_projection_input(lm, ids, layer).unflatten(-1, (layout.n_heads, layout.head_dim))
    v0 = values[layer][:, head // layout.group, 0]  # (B, dh): the kv head this query head reads
    torch.testing.assert_close(bos[:, :, head], v0[:, None].expand_as(bos[:, :, head]), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(bos[:, :, others], clean[:, :, others])
    mask = torch.zeros(ids.shape, dtype=torch.bool)
    mask[0, 2], mask[1, 5:9] = True, True
    with query_ablation(lm, {"cells": {HEAD: mask}}):
        partial = output_projection_input(lm, ids, layer).unflatten(-1, (layout.n_heads, layout.head_dim))
    assert torch.count_nonzero(partial[:, :, head][mask]) == 0
    torch.testing.assert_close(partial[:, :, head][~mask], clean[:, :, head][~mask])
    torch.testing.assert_close(partial[:, :, others], clean[:, :, others])


@pytest.mark.parametrize("name", ["falcon_alibi", "gpt_neox", "phi3", "mixtral"])
@pytest.mark.parametrize("delta", [0.3, 0.85])
def test_sink_query_cells_at_an_asymmetric_delta(name, delta, tiny):
    """The cells are `A[t,0] ≥ 1 − δ` (t ≥ 1) of the model's own eager maps, at δ where δ ≠ 1 − δ."""
    lm = tiny(name)
    ids = more.token_windows()[:3]
    heads = [(0, 0), (1, 2), HEAD]
    cells = sink_query_cells(lm, ids, heads, delta)
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions
    marked = 0
    for layer, head in heads:
        col0 = maps[layer][:, head, :, 0]
        for b in range(ids.shape[0]):
            for t in range(ids.shape[1]):
                expected = t >= 1 and col0[b, t].item() >= 1 - delta
                assert bool(cells[(layer, head)][b, t]) == expected, (name, layer, head, b, t)
                marked += expected
    assert 0 < marked < len(heads) * ids.numel()


@pytest.fixture
def asymmetric(monkeypatch):
    """The other families' column test at δ = 0.35 (1 − δ = 0.65 ≠ δ), τ = 0.45 and two more ε."""
    more.model_and_reference.cache_clear()
    monkeypatch.setattr(more, "CONFIG", more.AnalyzeConfig(epsilon=0.2, delta=0.35, tau=0.45, epsilons=(0.1, 0.55),
                                                           geometry_cap=0))  # fmt: skip
    yield
    more.model_and_reference.cache_clear()  # the cached references belong to this configuration


@pytest.mark.parametrize(("name", "path"), [("falcon_alibi", "blocks"), ("gpt_neox", "default"), ("phi3", "blocks"),
                                            ("qwen3_moe", "default")])  # fmt: skip
def test_every_column_at_an_asymmetric_delta(name, path, asymmetric, monkeypatch):
    more.test_every_column_equals_the_eager_reference(name, path, monkeypatch)
