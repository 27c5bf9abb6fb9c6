"""Survivor of the second sampled mutmut run over `reproduction/` (docs/testing.md, "Mutation tool"): the
sink-query ablation zeroes its cells, on a tiny random Llama."""

from __future__ import annotations

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.reproduction.sink_query import sink_query_losses


def _tiny_llama() -> LoadedModel:
    """A 2-layer, 4-head (2 kv heads) random Llama with eager attention, weights from the current torch seed."""
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=101, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    return LoadedModel(model=LlamaForCausalLM(config).eval(), tokenizer=None, family=family_for("llama"), identity={})


def test_zeroed_sink_queries_change_the_loss():
    """δ = 0.99: every query with A[t, 0] ≥ 0.01 in a listed head is a sink query, so the selected cells are many
    and zeroing them moves the loss (with the cells never handed to the hooks it would be exactly 0)."""
    torch.manual_seed(0)
    lm = _tiny_llama()
    ids = torch.randint(2, 101, (2, 12), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 1
    heads = [(layer, head) for layer in range(2) for head in range(4)]
    out = sink_query_losses(lm, list(ids.split(1)), heads, n_draws=2, seed=0, delta=0.99)
    assert (out["cells_selected"] > 0).all()
    assert np.all(np.abs(out["selected"]) > 1e-6)


def test_the_random_sets_of_the_sink_query_ablation_follow_its_seed():
    """`pipelines.query_ablation.sink_query_ablation`: the same seed draws the same matched random head-and-query
    sets (the same losses), another seed other sets."""
    from sinkscope.pipelines.query_ablation import sink_query_ablation

    torch.manual_seed(0)
    lm = _tiny_llama()
    ids = torch.randint(2, 101, (2, 12), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 1
    heads = [(0, 1), (1, 2)]
    first, again, other = (
        sink_query_ablation(lm, [ids], heads, n_random=2, seed=s, delta=0.99) for s in (5, 5, 6)
    )
    random = first["set"] != "sink queries"
    assert random.sum() == 2 and first["delta_loss"].equals(again["delta_loss"])
    assert (first.loc[random, "delta_loss"] != other.loc[random, "delta_loss"]).all()
