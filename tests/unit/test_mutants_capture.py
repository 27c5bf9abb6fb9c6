"""Survivors of the sampled mutmut run over `capture/` (docs/testing.md, "Mutation tool"), each checked against a
hand count written out here."""

from __future__ import annotations

import torch

from sinkscope.capture.attention import sinkscope_attention
from sinkscope.capture.text_maps import text_ids


class WordTokenizer:
    """One token per word, its id the word's length · 10; BOS 1, EOS 2."""

    bos_token_id, eos_token_id = 1, 2

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [10 * len(word) for word in text.split()]}


def test_text_ids_start_with_the_given_bos_id_else_the_tokenizers():
    """["ab c", "def"] → words of length 2, 1 | EOS | 3: [BOS, 20, 10, 2, 30], cut to 4 tokens in all."""
    assert text_ids(WordTokenizer(), ["ab c", "def"], seq_len=4, bos_id=7).tolist() == [7, 20, 10, 2]
    assert text_ids(WordTokenizer(), ["ab c", "def"]).tolist() == [1, 20, 10, 2, 30]


def test_a_learned_sink_call_without_a_scaling_uses_one_over_root_head_size():
    """transformers' convention (sdpa's too): `scaling=None` is 1/√D, D the head size. A learned-sink call (gpt-oss,
    here on a module no statistic watches) with H = 2 heads of D = 8: the output equals the float64 softmax over
    [causal logits q·k/√8, the head's sink logit] without its sink column, times v."""
    generator = torch.Generator().manual_seed(0)
    B, H, T, D = 1, 2, 5, 8
    q, k, v = (torch.randn(B, H, T, D, generator=generator) for _ in range(3))
    sinks = torch.tensor([0.5, -1.0])
    out, _ = sinkscope_attention(torch.nn.Module(), q, k, v, None, scaling=None, s_aux=sinks)
    logits = (q @ k.transpose(-1, -2)).double() / D**0.5
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -torch.inf)
    with_sink = torch.cat([logits, sinks.double().view(1, H, 1, 1).expand(B, H, T, 1)], -1)
    probs = torch.softmax(with_sink, -1)[..., :-1]  # the sink column's mass is dropped
    torch.testing.assert_close(out.double(), (probs @ v.double()).transpose(1, 2), rtol=1e-5, atol=1e-6)
