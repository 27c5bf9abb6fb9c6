"""The ablations' sensitivity passes (`reproduction.ablation_variants`) on a tiny random Llama: every variant has
the set its scale names, and the dormant set's Δloss equals zeroing those heads by hand (plain loops over
`o_proj`'s input, no sinkscope hook)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.reproduction.ablation_variants import ablation_variants, variant_arrays


def _loss_by_hand(model, ids: torch.Tensor, zeroed: list[tuple[int, int]], head_dim: int) -> float:
    handles = []
    for layer in {layer for layer, _ in zeroed}:
        heads = [head for lay, head in zeroed if lay == layer]

        def pre_hook(_module, args, heads=heads):
            x = args[0].clone()
            for head in heads:
                x[..., head * head_dim:(head + 1) * head_dim] = 0
            return (x,)

        handles.append(model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(pre_hook))
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits
    finally:
        for handle in handles:
            handle.remove()
    return float(F.cross_entropy(logits[0, :-1].double(), ids[0, 1:]))


def test_each_variant_ablates_the_set_its_scale_names():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=101, max_position_embeddings=64,
                         attn_implementation="eager")  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    lm = LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})
    ids = torch.randint(2, 101, (3, 12), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 1
    batches = list(ids.split(1))
    heads = [(layer, head) for layer in range(2) for head in range(4)]
    scores = pd.DataFrame({"layer": [h[0] for h in heads], "head": [h[1] for h in heads],
                           "ahon_ln": [0.5, 0.1, 0.7, 0.3, 0.9, 0.2, 0.8, 0.6],
                           "hard_sink_frac": np.linspace(0.9, 0.1, 8)})  # fmt: skip
    arrays = ablation_variants(lm, batches, scores, fraction=0.25, delta=0.5, draws=2, seed=0)

    dormant = variant_arrays(arrays, "dormant_heads")
    sink = variant_arrays(arrays, "sink_ablation")
    assert set(dormant) == {("head_fraction", 0.5), ("head_fraction", 2.0)}
    assert set(sink) == {("head_fraction", 0.5), ("head_fraction", 2.0), ("sink_query_delta", 0.5),
                         ("sink_query_delta", 2.0)}  # fmt: skip
    # 8 heads: 12.5 % → 1 head, 50 % → 4 heads; δ × ½, × 2 keep the 25 % set (2 heads)
    assert [int(dormant[("head_fraction", s)]["n_heads"]) for s in (0.5, 2.0)] == [1, 4]
    assert [int(sink[(name, s)]["n_heads"]) for name, s in sorted(sink)] == [1, 4, 2, 2]
    for data in (*dormant.values(), *sink.values()):
        assert data["selected"].shape == (3,)
        assert all(data[name].shape == (3, 2) for name in data if name not in ("selected", "n_heads", "cells_selected"))
    # δ × 2 = 1: A[t,0] ≥ 0 holds on every query t ≥ 1, so each of the 2 heads is zeroed on all 11 of every window;
    # δ × ½ = 0.25 (A[t,0] ≥ 0.75) on fewer
    assert sink[("sink_query_delta", 2.0)]["cells_selected"].tolist() == [22.0] * 3
    assert sink[("sink_query_delta", 0.5)]["cells_selected"].sum() < 66

    lowest_four = [(0, 1), (1, 1), (0, 3), (0, 0)]  # ahon_ln 0.1, 0.2, 0.3, 0.5
    for b, window in enumerate(batches):
        by_hand = _loss_by_hand(model, window, lowest_four, 8) - _loss_by_hand(model, window, [], 8)
        assert np.isclose(dormant[("head_fraction", 2.0)]["selected"][b], by_hand, atol=1e-5)
