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
from sinkscope.statistics.key_tokens import KeyTokens
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


def test_key_tokens_at_the_shortest_window_that_has_a_key(lm):
    """`KeyTokens` skips windows shorter than 3 (no key at 1..T−2); at T = 3 position 1 is the only key and
    `received_1 = A[2,1]`: per id, `received_mean = Σ_{layers, heads, occurrences} A[2,1] / (n L H)` and
    `sink_frac` the share of those above ε, against the plain transformers forward's eager attention maps."""
    T, eps = 3, 0.3335  # near-uniform random maps: A[2,1] ≈ 1/3, so this ε splits them
    L, H = SIZES["num_hidden_layers"], SIZES["num_attention_heads"]
    ids = torch.tensor([[2, 17, 40], [2, 17, 5], [2, 33, 17]])
    stat = KeyTokens(L, H, T, eps)
    feed = Feed([stat], T, lm.layout.group, AnalyzeConfig().delta)
    with torch.no_grad(), feed.hooks(lm):
        feed.begin_batch(ids)
        lm.base(input_ids=ids, use_cache=False)
        feed.end_batch(len(ids))
    tokens = stat.compute(len(ids)).extra["tokens"].set_index("token_id")
    config = lm.model.config
    previous = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            maps = lm.model(
                input_ids=ids, output_attentions=True, use_cache=False
            ).attentions  # L × (B, H, T, T)
    finally:
        config._attn_implementation = previous
    received = torch.stack([m[:, :, 2, 1] for m in maps]).double()  # (L, B, H): A[2,1]
    assert 0 < (received > eps).double().mean() < 1  # sink_frac is neither 0 nor 1
    assert sorted(tokens.index) == [17, 33]
    for token, windows in ((17, [0, 1]), (33, [2])):
        values = received[:, windows]
        assert tokens.loc[token, "n"] == len(windows)
        assert tokens.loc[token, "received_mean"] == pytest.approx(values.mean().item(), rel=1e-5)
        assert tokens.loc[token, "sink_frac"] == pytest.approx((values > eps).double().mean().item())
