"""A real (word-level) Hugging Face fast tokenizer over ten words; it adds no special tokens by itself. Shared by the
window tests (test_windows, test_boundaries_windows)."""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

WORDS = ["<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f", "g"]


def word_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")
