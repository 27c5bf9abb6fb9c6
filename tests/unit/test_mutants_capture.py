"""Survivors of the sampled mutmut run over `capture/` (docs/testing.md, "Mutation tool"), each checked against a
hand count written out here."""

from __future__ import annotations

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
