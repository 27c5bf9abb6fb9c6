"""Issue 32, item 10: a text corpus is read and tokenized in chunks, only as far as the windows asked for, and the
windows are exactly those of the whole-file reader (the file decoded at once, split at blank lines, each document
tokenized whole) — for files with and without blank lines, documents many chunks long, multi-byte characters and
runs of bad bytes cut by a chunk boundary, real BPE tokenizers (byte-level and SentencePiece-style), and the tail
and whole-text modes."""

import random
import re

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import sinkscope.corpus.document_tokens as document_tokens
import sinkscope.corpus.text_file as text_file
from sinkscope.corpus.windows import corpus_length, windows

SPECIALS = ["<bos>", "<eos>", "<unk>"]
ALPHABET = "ab cdé日本 🙂\tx-=."  # multi-byte characters of 2, 3 and 4 bytes


def sample_text(rng: random.Random, n: int) -> str:
    words = ["".join(rng.choice("abcdeé日本🙂xyz") for _ in range(rng.randint(1, 9))) for _ in range(60)]
    out = []
    for _ in range(n):
        out.append(rng.choice(words))
        out.append(rng.choice([" ", " ", " ", "  ", ", ", ".\n", "\t", " ==== ", "\n"]))
    return "".join(out)


def trained(kind: str) -> PreTrainedTokenizerFast:
    """A real BPE tokenizer trained on sample text: GPT-2-style byte-level, or SentencePiece-style (Metaspace, a
    '▁' prepended to every text) whose first token depends on where the text starts."""
    core = Tokenizer(models.BPE(unk_token=None if kind == "bytelevel" else "<unk>"))
    if kind == "bytelevel":
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        core.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:  # "nosplit": merges cross the '▁' of spaces, so where a window starts can change tokens far from it
        core.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=kind == "metaspace")
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, initial_alphabet=alphabet)
    core.train_from_iterator([sample_text(random.Random(1), 4000)], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


def pairs() -> PreTrainedTokenizerFast:
    """A BPE whose merges cross spaces and pair words from the left ('▁a' '▁a' → '▁a▁a'): in a run of 'a a a …'
    every token depends on where the text starts, however far away, so windows cut anywhere disagree."""
    vocab = {w: i for i, w in enumerate([*SPECIALS, "▁", "a", "▁a", "▁a▁a"])}
    core = Tokenizer(models.BPE(vocab, [("▁", "a"), ("▁a", "▁a")], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=False)
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


@pytest.fixture(scope="module", params=["bytelevel", "metaspace", "nosplit", "pairs", "wordlevel"])
def tokenizer(request):
    if request.param == "pairs":
        return pairs()
    if request.param != "wordlevel":
        return trained(request.param)
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate([*SPECIALS, "ab", "x"])}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 7 bytes and windows of 64 characters with margins of 14: every boundary is crossed many times."""
    monkeypatch.setattr(text_file, "CHUNK_BYTES", 7)
    monkeypatch.setattr(document_tokens, "CHARS", 64)
    monkeypatch.setattr(document_tokens, "MARGIN", 14)


def whole_file_stream(path, tokenizer) -> list[int]:
    """The reference: the file decoded whole (each run of bad bytes one U+FFFD), split at blank lines, each stripped
    non-empty document tokenized whole, EOS between documents."""
    text = re.sub("[\udc80-\udcff]+", "\ufffd", path.read_bytes().decode("utf-8", errors="surrogateescape"))
    docs = [block.strip() for block in text.split("\n\n") if block.strip()]
    stream: list[int] = []
    for index, doc in enumerate(docs):
        stream += ([tokenizer.eos_token_id] if index else []) + tokenizer(doc, add_special_tokens=False)["input_ids"]
    return stream


def reference_windows(stream: list[int], seq_len: int, tail: str, max_windows: int | None = None) -> list[list[int]]:
    body = seq_len - 1
    full = [[0, *stream[i : i + body]] for i in range(0, len(stream) - body + 1, body)]
    if len(stream) % body and full and tail == "overlap":
        full.append([0, *stream[-body:]])
    return full[:max_windows]


CORPORA = {
    "one line": lambda rng: sample_text(rng, 700).replace("\n", " ").encode(),
    "blank lines": lambda rng: "\n\n".join(sample_text(rng, rng.randint(0, 120)) for _ in range(9)).encode(),
    "edges": lambda rng: b"\n\n\n  lead \n\n \t \n\n\n\n" + sample_text(rng, 300).encode() + b"  \n\n\n\n x \n\n  ",
    "bad bytes": lambda rng: sample_text(rng, 400).encode() + b"\xff\xfe" * 5 + sample_text(rng, 200).encode()
    + b"\xe6\x97" + b"\n\n" + sample_text(rng, 50).encode(),
    "no spaces": lambda rng: b"ab " + b"=" * 400 + b"xy" * 200 + b" " + sample_text(rng, 300).encode(),
    "a a a": lambda rng: b"a " * 300 + b"a\n\n" + b" a" * 201,
    "long space": lambda rng: sample_text(rng, 200).encode() + b" " * 300 + sample_text(rng, 200).encode(),
}


@pytest.mark.parametrize("name", CORPORA)
def test_chunked_windows_equal_the_whole_file_readers(tmp_path, tokenizer, small_chunks, name):
    path = tmp_path / f"{name}.txt"
    path.write_bytes(CORPORA[name](random.Random(len(name))))
    stream = whole_file_stream(path, tokenizer)
    assert len(stream) > 10 * document_tokens.CHARS // 8 or name in ("bad bytes", "edges")
    for seq_len, tail, max_windows in [(17, "overlap", None), (64, "drop", None), (33, "overlap", 5)]:
        got = windows(str(path), tokenizer, seq_len, max_windows, bos_id=0, batch_size=4, tail=tail)
        assert torch.cat(list(got)).tolist() == reference_windows(stream, seq_len, tail, max_windows), (seq_len, tail)
    assert corpus_length(str(path), tokenizer) == len(stream)  # --seq-len whole: one window of every token
    whole = windows(str(path), tokenizer, len(stream) + 1, bos_id=0)
    assert torch.cat(list(whole)).tolist() == [[0, *stream]]


def count_reads(monkeypatch) -> list[int]:
    """The sizes of every `read` of `corpus/text_file.py`'s file handles, from now on (the list fills as it reads)."""
    read: list[int] = []

    class Counting:
        def __init__(self, *args, **kwargs):
            self.handle = open(*args, **kwargs)

        def read(self, n: int) -> bytes:
            read.append(len(data := self.handle.read(n)))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(text_file, "open", Counting, raising=False)
    return read


def test_only_what_the_windows_ask_for_is_read(tmp_path, monkeypatch):
    """A single-line file of 40 MB (no blank line: one document) with --max-windows 2: a chunk or two is read and
    tokenized, not the file."""
    path = tmp_path / "one line.txt"
    line = (sample_text(random.Random(0), 20000).replace("\n", " ") + " ").encode()
    with open(path, "wb") as handle:
        for _ in range(40_000_000 // len(line)):
            handle.write(line)
    read, tokenized = count_reads(monkeypatch), []
    original = document_tokens.DocumentTokens._tokenize
    monkeypatch.setattr(document_tokens.DocumentTokens, "_tokenize",
                        lambda self, s, e: tokenized.append(e - s) or original(self, s, e))  # fmt: skip
    stream = windows(str(path), trained("bytelevel"), 64, max_windows=2, bos_id=0)
    assert stream.available() == 2 and len(torch.cat(list(stream))) == 2
    assert sum(read) <= 4 * text_file.CHUNK_BYTES
    assert sum(tokenized) <= 4 * (document_tokens.CHARS + 3 * document_tokens.MARGIN)


def test_a_view_of_a_file_reads_only_its_first_window(tmp_path, monkeypatch):
    """`view --file` and `sinkscope.attention(file=…)` (`file_ids`): the ids equal `text_ids` of the whole file's
    documents, and on a 40 MB single-line file only a chunk or two is read."""
    from sinkscope.capture.text_maps import file_ids, text_ids
    from sinkscope.corpus.sources import documents

    tokenizer = trained("bytelevel")
    small = tmp_path / "small.txt"
    small.write_text(sample_text(random.Random(1), 60) + "\n\n" + sample_text(random.Random(2), 60), encoding="utf-8")
    for seq_len in (16, 200, None):  # None: the whole text (< MAX_TOKENS here), two documents joined with EOS
        expected = text_ids(tokenizer, list(documents(str(small))), seq_len, 0)
        assert torch.equal(file_ids(tokenizer, small, seq_len, 0), expected)
    path = tmp_path / "one line.txt"
    line = (sample_text(random.Random(0), 20000).replace("\n", " ") + " ").encode()
    with open(path, "wb") as handle:
        for _ in range(40_000_000 // len(line)):
            handle.write(line)
    read = count_reads(monkeypatch)
    assert len(file_ids(tokenizer, path, 64, 0)) == 64
    assert sum(read) <= 4 * text_file.CHUNK_BYTES
