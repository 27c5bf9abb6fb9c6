"""Every statistic of an analysis merges like one pass: two "ranks" (even and odd windows, each its own feed),
one of them saved and restored through `state_dict`, merged statistic by statistic, give the tables of one feed
over all windows — on a tiny llama and a tiny Gemma 3 (post-attention norm: the smoothing moments re-shift)."""

import pandas as pd
import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

from sinkscope.capture.feed import Feed
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, joined, statistics_for

T, WINDOWS = 12, 7
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, vocab_size=101, max_position_embeddings=64)  # fmt: skip


def tiny(kind: str) -> LoadedModel:
    torch.manual_seed(0)
    if kind == "llama":
        model, family = LlamaForCausalLM(LlamaConfig(**SIZES)), family_for("llama")
    else:
        model, family = Gemma3ForCausalLM(Gemma3TextConfig(**SIZES, sliding_window=16)), family_for("gemma3_text")
    return LoadedModel(model=model.eval().requires_grad_(False), tokenizer=None, family=family, identity={})


def feed_windows(lm: LoadedModel, ids: torch.Tensor, shard: tuple[int, int]) -> Feed:
    config = AnalyzeConfig(geometry_cap=20, epsilons=(0.5,))
    feed = Feed(statistics_for(lm, T, config, smoothing=True), T, lm.layout.group, config.delta, shard=shard)
    rank, world = shard
    with torch.no_grad(), feed.hooks(lm):
        for batch in ids[rank::world].split(2):
            feed.begin_batch(batch)
            lm.base(input_ids=batch, use_cache=False)
            feed.end_batch(len(batch))
    return feed


def tables(feed: Feed, windows: int) -> tuple:
    heads, layers, positions, extra = joined(s.compute(windows) for s in feed.statistics)
    return heads, layers, positions, extra["tokens"], extra["token_layers"], extra["smoothing_curves"]


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_merged_and_restored_statistics_equal_one_pass(kind):
    lm = tiny(kind)
    ids = torch.randint(3, 101, (WINDOWS, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 2
    whole = feed_windows(lm, ids, (0, 1))
    even, odd = feed_windows(lm, ids, (0, 2)), feed_windows(lm, ids, (1, 2))
    restored = Feed(statistics_for(lm, T, AnalyzeConfig(geometry_cap=20, epsilons=(0.5,)), smoothing=True), T)
    restored.load_state_dict(odd.state_dict())
    assert restored.windows == 3
    for mine, other in zip(even.statistics, restored.statistics, strict=True):
        mine.merge(other)
    expected, got = tables(whole, WINDOWS), tables(even, WINDOWS)
    assert len(expected[0]) == 8 and "smooth_b" in expected[0] and "gamma1" in "".join(expected[1].columns)
    for left, right in zip(expected, got, strict=True):
        # different batches give float32 forwards that differ in the last bits; the float64 sums add nothing
        pd.testing.assert_frame_equal(left, right, rtol=1e-5, atol=1e-7)
