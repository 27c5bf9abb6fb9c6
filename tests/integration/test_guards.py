"""The guards of an analysis, each triggered by a constructed input: attention that is not a causal softmax (mass
above the diagonal; rows that do not sum to 1), non-finite attention on every path (naming the window and the
layer), and attention that a forward pass never completes. Tiny random Llama (test_reference_columns.tiny)."""

from __future__ import annotations

import pytest
import torch

import sinkscope.capture.attention as attention
from sinkscope.capture.feed import Feed
from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.functional.patterns import pattern_block_sums
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze
from sinkscope.statistics.pattern_scores import PatternScores
from sinkscope.statistics.statistic import Columns, QueryBlock

from .test_reference_columns import V, one_thread, tiny, token_windows  # noqa: F401  (one_thread: autouse)

NOT_CAUSAL = "not a causal softmax"


def pattern_scores_of(probs: torch.Tensor) -> PatternScores:
    """PatternScores fed one window of a hand-made map (1, H, T, T) as one block, the way the feed hands it on."""
    _, H, T, _ = probs.shape
    statistic = PatternScores(1, H, T, epsilon=0.3)
    sums, hard_sink, hard_diag = pattern_block_sums(probs, 0, 0.1)
    columns, diagonal = sums.pop("columns"), sums.pop("diagonal")
    statistic.on_query_block(0, QueryBlock(0, sums, hard_sink, hard_diag, torch.ones(1, H, T)))
    statistic.on_columns(0, Columns(columns, diagonal))
    return statistic


def causal_softmax(logits: torch.Tensor) -> torch.Tensor:
    T = logits.shape[-1]
    return logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def test_a_causal_softmax_passes_the_guard():
    logits = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(0))
    heads = pattern_scores_of(causal_softmax(logits)).compute(1).heads
    assert len(heads) == 2


def test_mass_above_the_diagonal_alone_trips_the_guard():
    """Rows sum to 1 (a softmax without the causal mask): only the upper-mass condition can catch it."""
    logits = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(0))
    with pytest.raises(SinkscopeError, match=NOT_CAUSAL):
        pattern_scores_of(logits.softmax(-1)).compute(1)


def test_mass_just_above_the_diagonal_trips_the_guard():
    """A mask off by one (each query also sees the next key): all the non-causal mass sits at A[t, t+1]."""
    probs = causal_softmax(torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(0)))
    t = torch.arange(5)
    probs[..., t, t + 1] = 0.01
    probs[..., t, t] -= 0.01
    with pytest.raises(SinkscopeError, match=NOT_CAUSAL):
        pattern_scores_of(probs).compute(1)


def test_rows_that_do_not_sum_to_one_alone_trip_the_guard():
    """Causal, but every row holds 0.999 of its mass (a normaliser off by 0.1%): only the row-sum condition can."""
    logits = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(0))
    with pytest.raises(SinkscopeError, match=NOT_CAUSAL):
        pattern_scores_of(causal_softmax(logits) * 0.999).compute(1)


def test_an_attention_mask_that_lets_queries_see_later_keys_stops_the_run(monkeypatch):
    """The failure the guard exists for: an attention function registered with a mask function that does not mask
    (here: every key visible to every query), through a real model's forward pass."""
    import transformers.masking_utils as masking

    def see_everything(batch_size, q_length, kv_length, *args, **kwargs):
        return torch.ones(batch_size, 1, q_length, kv_length, dtype=torch.bool)

    monkeypatch.setattr(masking, "sdpa_mask", see_everything)
    with pytest.raises(SinkscopeError, match=NOT_CAUSAL):
        analyze(tiny("llama"), TokenWindows(token_windows(), batch_size=4), AnalyzeConfig(geometry_cap=0),
                progress=False)


@pytest.mark.parametrize("path", ["default", "fused", "blocks"])
def test_non_finite_attention_names_the_window_and_the_layer(path, monkeypatch):
    """Token id 5 gets a NaN embedding and occurs only in window 6 (the third batch of 3): its first layer's
    attention is NaN there, on whichever path computes it."""
    lm = tiny("llama")
    with torch.no_grad():
        lm.model.get_input_embeddings().weight[5] = torch.nan
    ids = token_windows()
    ids[ids == 5] = 6
    ids[6, 4] = 5
    if path == "fused":
        monkeypatch.setattr(attention.fused_cpu, "available", lambda: False)  # the compiled kernel would take it
        monkeypatch.setattr(attention, "ROWS_UP_TO_SEQ_LEN", 0)
    elif path == "blocks":
        monkeypatch.setattr(attention, "attention_path", lambda *args, **kwargs: "blocks")
    with pytest.raises(SinkscopeError, match=r"window 6 gave non-finite attention in layer 0 .*check the model's weights"):
        analyze(lm, TokenWindows(ids, batch_size=3), AnalyzeConfig(geometry_cap=0), progress=False)


def test_a_layer_whose_last_query_block_never_comes_stops_the_batch():
    """The feed hands a layer's column sums on only after its last block; a pass that ends before raises."""
    T, H = 8, 2
    feed = Feed([PatternScores(1, H, T, epsilon=0.3)], seq_len=T)
    ids = torch.randint(2, V, (1, T))
    feed.begin_batch(ids)
    probs = causal_softmax(torch.randn(1, H, T, T))[:, :, :5, :5]  # queries 0..4 of 8
    feed.on_block(0, 0, probs, torch.zeros(1, H, 5), torch.zeros(1, H, 5, 4))
    with pytest.raises(SinkscopeError, match=r"layers \[0\] never reached their last query block"):
        feed.end_batch(1)


def test_an_attention_module_the_forward_pass_skips_is_named():
    """Layer 1's attention module returns zeros without calling the attention function: its input norm runs (the
    layer-input hooks are reached), but no attention of that layer ever reaches the statistics."""
    lm = tiny("llama")
    lm.layers[1].self_attn.forward = lambda hidden_states, *args, **kwargs: (torch.zeros_like(hidden_states), None)
    with pytest.raises(SinkscopeError, match=r"\[1\].*never"):
        analyze(lm, TokenWindows(token_windows(), batch_size=4), AnalyzeConfig(geometry_cap=0), progress=False)
