"""Draw 53's survivors in `statistics/`, by kind (issue 34): boundaries probed at their exact cut.

`SmoothingCurves` needs ≥ 2 context tokens: `seq_len ≥ 3` at construction, and `moments` needs n ≥ 2 pooled
context tokens. At the cut (one window of 3 tokens: n = 2) the moments must equal numpy's float64 mean and
covariance of the plain transformers forward's [h, z] rows; one below the cut each raises its one-line message."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.capture.feed import Feed
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig
from sinkscope.statistics.smoothing_curves import SmoothingCurves

SIZES = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=4, vocab_size=61, max_position_embeddings=32)  # fmt: skip


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SIZES)).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})


def test_smoothing_moments_at_two_context_tokens_and_the_cuts_below(lm):
    T = 3  # the shortest window smoothing accepts: context tokens 1 and 2
    with pytest.raises(SinkscopeError) as short:
        SmoothingCurves(lm, T - 1)
    assert str(short.value) == "--seq-len 2 is too short for smoothing: it needs ≥ 2 context tokens"
    stat = SmoothingCurves(lm, T)
    with pytest.raises(SinkscopeError) as empty:
        stat.moments(0)
    assert str(empty.value) == "no context tokens were seen: run a forward pass inside the feed's hooks first"
    ids = torch.tensor([[2, 17, 40]])
    feed = Feed([stat], T, lm.layout.group, AnalyzeConfig().delta)
    with torch.no_grad(), feed.hooks(lm):
        feed.begin_batch(ids)
        lm.base(input_ids=ids, use_cache=False)
        feed.end_batch(len(ids))
    with torch.no_grad():
        hidden = lm.model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    for layer in range(SIZES["num_hidden_layers"]):
        h = hidden[layer]
        z = lm.model.model.layers[layer].input_layernorm(h)
        rows = torch.cat([h, z], -1)[0, 1:].double().numpy()  # the 2 context tokens
        assert stat.pooled.n[layer] == 2
        mu, cov = stat.moments(layer)
        np.testing.assert_allclose(mu, rows.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cov, np.cov(rows.T, bias=True), rtol=1e-5, atol=1e-6)
