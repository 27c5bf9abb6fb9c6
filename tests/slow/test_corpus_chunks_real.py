"""Issue 32, item 10, on the embedded models' real tokenizers (SmolLM2's byte-level BPE, Gemma 3's SentencePiece
BPE) at the default sizes: a 300 kB document of Python source without a blank line (indentation, long runs of
spaces) is tokenized in windows of 64K characters to exactly the ids of tokenizing it whole."""

import re

import pytest
from transformers import AutoTokenizer

import sinkscope.corpus.document_tokens as document_tokens
from sinkscope.corpus.sources import _stdlib_files
from sinkscope.models.embedded import embedded_installed
from sinkscope.models.load import _resolve

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_a_long_document_in_windows_is_the_whole_documents_tokens(name, tmp_path, monkeypatch):
    if not embedded_installed(name):
        pytest.skip(f"{name} is not installed")
    tokenizer = AutoTokenizer.from_pretrained(_resolve(name)[0])
    text = "".join(path.read_text(encoding="utf-8", errors="replace") for path in _stdlib_files()[:40])
    text = re.sub(r"\n\s*\n", "\n", re.sub(r"\n\s*\n", "\n", text))[:300_000].strip()
    assert "\n\n" not in text and len(text) == 300_000
    corpus = tmp_path / "code.txt"
    corpus.write_text(text, encoding="utf-8")
    cuts = []
    original = document_tokens.DocumentTokens._agreed
    monkeypatch.setattr(document_tokens.DocumentTokens, "_agreed",
                        lambda self, *args: cuts.append(original(self, *args)) or cuts[-1])  # fmt: skip
    ids = [i for piece in document_tokens.corpus_tokens(str(corpus), tokenizer) for i in piece]
    assert len(cuts) >= 4 and min(cuts) >= 0  # cut four times or more, each agreed by the next window
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
