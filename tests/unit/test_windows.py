"""SPEC §1 windows: BOS prefix, EOS between documents, T-1 token chunks, the tail in an overlapping last window (or
dropped on request); corpus sources and errors."""

import json

import pytest
import torch

from sinkscope.corpus.sources import documents
from sinkscope.corpus.windows import TokenWindows, windows
from sinkscope.errors import SinkscopeError
from unit.word_tokenizer import WORDS, word_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


def ids(words: str) -> list[int]:
    return [WORDS.index(w) for w in words.split()]


def test_windows_follow_the_spec(tmp_path, tokenizer):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\nd\n\ne f\n\n\ng a b c d e f")
    stream = windows(str(corpus), tokenizer, seq_len=4, batch_size=2)
    got = torch.cat(list(stream))
    # Stream: a b c d <eos> e f <eos> g a b c d e f (15 tokens) → chunks of 3, each BOS-prefixed; tail dropped.
    flat = ids("a b c d") + [1] + ids("e f") + [1] + ids("g a b c d e f")
    expected = [[0, *flat[i : i + 3]] for i in range(0, 15 - 2, 3)]
    assert got.tolist() == expected
    assert stream.count == 5
    assert stream.identity()["windows"] == 5


def test_the_tail_gets_a_last_window_of_the_final_tokens_unless_dropped(tmp_path, tokenizer):
    """Issue 35: 17 tokens at T = 4 fill 5 windows of 3 and leave 2; the last window holds the final 3 tokens (1 of
    them also in the window before), so no token is dropped; `tail="drop"` leaves the 2 out and says so."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c d e f g a b c d e f g a b c")
    flat = ids("a b c d e f g a b c d e f g a b c")
    stream = windows(str(corpus), tokenizer, seq_len=4, batch_size=4)
    got = torch.cat(list(stream)).tolist()
    assert got == [[0, *flat[i : i + 3]] for i in range(0, 15, 3)] + [[0, *flat[-3:]]]
    assert stream.tokens() == {"read": 17, "analysed": 17, "overlap": 1, "dropped": 0, "windows": 6, "complete": True}
    assert stream.available() is None and windows(str(corpus), tokenizer, 4, 50).available() == 6
    covered = {i for start in [*range(0, 15, 3), 14] for i in range(start, start + 3)}
    assert covered == set(range(17))  # every token in some window
    dropped = windows(str(corpus), tokenizer, seq_len=4, tail="drop")
    assert torch.cat(list(dropped)).tolist() == got[:5]
    assert dropped.tokens() == {"read": 17, "analysed": 15, "overlap": 0, "dropped": 2, "windows": 5, "complete": True}
    assert dropped.identity()["tail"] == "drop" and stream.identity()["tail"] == "overlap"
    exact = windows(str(corpus), tokenizer, seq_len=4, max_windows=6)  # --max-windows stops at the tail window
    list(exact)
    assert exact.tokens()["complete"] and exact.tokens()["analysed"] == 17
    limited = windows(str(corpus), tokenizer, seq_len=4, max_windows=2)
    list(limited)
    assert limited.tokens() == {"read": 6, "analysed": 6, "overlap": 0, "dropped": 0, "windows": 2, "complete": False}
    with pytest.raises(SinkscopeError, match="--tail 'cut' is not one of overlap, drop"):
        windows(str(corpus), tokenizer, seq_len=4, tail="cut")


def test_a_corpus_shorter_than_one_window_points_to_whole(tmp_path, tokenizer):
    from sinkscope.corpus.windows import corpus_length

    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\n\nc")
    assert corpus_length(str(corpus), tokenizer) == 4  # a b <eos> c
    with pytest.raises(SinkscopeError, match="--seq-len whole \\(one window of 5\\)"):
        list(windows(str(corpus), tokenizer, seq_len=8))
    assert torch.cat(list(windows(str(corpus), tokenizer, seq_len=5))).tolist() == [[0, *ids("a b"), 1, *ids("c")]]
    with pytest.raises(SinkscopeError, match="endless"):
        corpus_length("builtin:random", tokenizer)


def test_max_windows_and_bos_override(tmp_path, tokenizer):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": "a b c d e f g"}) for _ in range(4)))
    got = torch.cat(list(windows(str(corpus), tokenizer, seq_len=3, max_windows=3, bos_id=9)))
    assert got.shape == (3, 3)
    assert (got[:, 0] == 9).all()


def test_directory_corpus_reads_files_in_order(tmp_path, tokenizer):
    (tmp_path / "b.txt").write_text("c d")
    (tmp_path / "a.txt").write_text("a b")
    assert list(documents(str(tmp_path))) == ["a b", "c d"]


def test_controls(tokenizer):
    random = torch.cat(list(windows("builtin:random", tokenizer, 16, max_windows=4)))
    repeat = torch.cat(list(windows("builtin:repeat", tokenizer, 16, max_windows=4)))
    special = set(tokenizer.all_special_ids)
    assert random.shape == repeat.shape == (4, 16)
    assert not any(int(t) in special for t in random[:, 1:].flatten())
    assert all(len(set(row[1:].tolist())) == 1 for row in repeat)


def test_builtin_text_corpora_exist():
    assert sum(1 for _, _ in zip(documents("builtin:code"), range(3))) == 3
    prose = next(iter(documents("builtin:prose")))
    assert len(prose.split()) >= 8


@pytest.mark.parametrize(
    "source, message",
    [("missing.txt", "not found"), ("builtin:nope", "unknown built-in"), ("hf:x", "dataset")],
)
def test_bad_sources_give_clear_errors(tokenizer, source, message):
    with pytest.raises(SinkscopeError, match=message):
        list(windows(source, tokenizer, 8, max_windows=2))


def test_too_short_corpus_says_how_many_tokens(tmp_path, tokenizer):
    corpus = tmp_path / "short.txt"
    corpus.write_text("a b")
    with pytest.raises(SinkscopeError, match="gave 2 tokens.*needs 7"):
        list(windows(str(corpus), tokenizer, 8))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(SinkscopeError, match="gave 0 tokens"):
        list(windows(str(empty), tokenizer, 8))


def test_seq_len_one_is_rejected(tokenizer):
    with pytest.raises(SinkscopeError, match="too short"):
        windows("builtin:prose", tokenizer, 1)


def test_token_windows():
    w = TokenWindows(torch.arange(12).view(3, 4), batch_size=2)
    assert [b.shape[0] for b in w] == [2, 1]
    with pytest.raises(SinkscopeError):
        TokenWindows(torch.zeros(3, 1))
