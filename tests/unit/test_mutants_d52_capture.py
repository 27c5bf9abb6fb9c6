"""Draw 52's survivors in `capture/` (docs/testing.md, "Mutation tool"), by kind: every override a text-facing
capture function takes (`bos_id`, `seq_len`) is given a value other than its default and read back in the ids,
checked against ids written out by hand from a word-level tokenizer."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from sinkscope.capture.text_maps import MAX_TOKENS, check_length, file_ids, text_ids
from sinkscope.errors import SinkscopeError

VOCAB = {"<unk>": 0, "<bos>": 1, "<eos>": 2, "ab": 3, "c": 4, "def": 5, "g": 6}


def words(bos: str | None = "<bos>") -> PreTrainedTokenizerFast:
    """One token per word (ids in VOCAB); BOS 1 (or none), EOS 2."""
    core = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=bos, eos_token="<eos>", unk_token="<unk>")


@pytest.fixture(params=["text", "file"])
def ids_of(request, tmp_path):
    """`text_ids` of one document, or `file_ids` of a file holding it: the same window either way."""
    if request.param == "text":
        return lambda tokenizer, doc, **kw: text_ids(tokenizer, [doc], **kw).tolist()
    path = tmp_path / "doc.txt"

    def from_file(tokenizer, doc, **kw):
        path.write_text(doc, encoding="utf-8")
        return file_ids(tokenizer, path, **kw).tolist()

    return from_file


def test_every_override_of_text_and_file_ids_reaches_the_ids(ids_of):
    """The text "ab c def g" → [BOS, 3, 4, 5, 6]. A caller's `bos_id` (7 or 0, neither the tokenizer's 1) replaces BOS with
    and without a cut; `seq_len` N keeps N tokens in all (BOS included), at both ends of 2..MAX_TOKENS; no
    `seq_len` keeps the whole text; a tokenizer without BOS starts with its EOS (2)."""
    tok, doc = words(), "ab c def g"
    assert ids_of(tok, doc) == [1, 3, 4, 5, 6]
    assert ids_of(tok, doc, bos_id=7) == [7, 3, 4, 5, 6]
    assert ids_of(tok, doc, bos_id=0) == [0, 3, 4, 5, 6]  # a falsy id is still the caller's
    assert ids_of(tok, doc, seq_len=3, bos_id=7) == [7, 3, 4]
    assert ids_of(tok, doc, seq_len=2) == [1, 3]
    assert ids_of(tok, doc, seq_len=MAX_TOKENS, bos_id=7) == [7, 3, 4, 5, 6]  # shorter than N: all of it
    assert ids_of(words(bos=None), doc) == [2, 3, 4, 5, 6]
    assert ids_of(words(bos=None), doc, bos_id=5) == [5, 3, 4, 5, 6]


def test_two_documents_join_with_eos_in_text_ids_and_a_given_bos():
    assert text_ids(words(), ["ab c", "def"], seq_len=4, bos_id=7).tolist() == [7, 3, 4, 2]
    assert text_ids(words(), ["ab c", "def"], bos_id=7).tolist() == [7, 3, 4, 2, 5]


@pytest.mark.parametrize("seq_len", [1, 0, -3, MAX_TOKENS + 1])
def test_a_seq_len_outside_the_page_is_one_line_naming_the_range(ids_of, seq_len):
    expected = f"--seq-len {seq_len} must lie in 2..{MAX_TOKENS} (BOS plus at least one token)"
    with pytest.raises(SinkscopeError) as error:
        check_length(seq_len)
    assert str(error.value) == expected
    with pytest.raises(SinkscopeError) as error:
        ids_of(words(), "ab c", seq_len=seq_len, bos_id=7)
    assert str(error.value) == expected
    check_length(None), check_length(2), check_length(MAX_TOKENS)
