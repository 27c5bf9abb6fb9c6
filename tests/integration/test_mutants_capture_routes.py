"""Survivor of the sampled mutmut run over `capture/` (docs/testing.md, "Mutation tool"): a layer that is not
watched takes transformers' sdpa inside `watch_attention`, so the model's output is the plain model's."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.capture.attention import watch_attention


def test_an_unwatched_layer_keeps_the_models_own_attention():
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=101, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    ids = torch.randint(2, 101, (2, 10), generator=torch.Generator().manual_seed(1))
    plain = model(input_ids=ids).logits
    seen = []
    layer0 = model.model.layers[0].self_attn
    with watch_attention(model, {0: layer0}, lambda *block: seen.append(block[0]), lambda *values: None):
        routed = model(input_ids=ids).logits
    assert seen and set(seen) == {0}  # layer 0 was watched, layer 1 not
    torch.testing.assert_close(routed, plain, rtol=1e-4, atol=1e-5)
