"""A corpus's token ids, each document tokenized in overlapping windows of text (issue 32, item 10).

A document is tokenized without special tokens, as `tokenizer(doc, add_special_tokens=False)` would tokenize it
whole, but at most about `SPAN` characters at a time, so memory does not grow with the document. Window k covers
the text from `MARGIN` characters before its first token to `MARGIN`-and-more characters past its last; its tokens
up to a cut `c` are given out only after window k+1 (which starts `MARGIN` before `c`) agrees with it on every
token within `MARGIN / 2` of `c` (same ids, same character offsets) and starts a token exactly at `c`. The cut is a
token that starts at whitespace (or follows it), where no tokenizer's choice depends on what lies beyond the
margin. When two windows disagree, or no such cut exists (a run of text without whitespace longer than the
window), the rest of the document is tokenized whole from the last agreed cut, as before. A tokenizer without
character offsets (a "slow" Python tokenizer) tokenizes every document whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sinkscope.corpus.sources import document_pieces
from sinkscope.errors import SinkscopeError

CHARS = 1 << 16  # characters of a window between its margins
MARGIN = 2048  # characters of context each side of a cut


def corpus_tokens(source: str, tokenizer) -> Iterator[list[int]]:
    """The token ids of `source` in pieces: each document's ids (`DocumentTokens`), the EOS id between documents
    (none when the tokenizer has no EOS). Their concatenation is the stream `windows` cuts (SPEC §1)."""
    eos = tokenizer.eos_token_id
    document: DocumentTokens | None = None
    for piece, new in document_pieces(source):
        if new:
            if document is not None:
                yield from document.finish()
                if eos is not None:
                    yield [int(eos)]
            document = DocumentTokens(tokenizer, CHARS, MARGIN)
        yield from document.add(piece)
    if document is not None:
        yield from document.finish()


@dataclass
class _Window:
    """One window's tokens: `start` its first character in the document, `ids`, `starts`/`ends` (document
    character offsets), `first` the index of the first token given out (at the last agreed cut)."""

    start: int
    end: int
    ids: list[int]
    starts: list[int]
    ends: list[int]
    first: int = 0


class DocumentTokens:
    """One document's token ids as its text arrives in pieces (module doc): `add(piece)` and, at the document's end,
    `finish()` yield lists of ids whose concatenation is the whole document's tokenization."""

    def __init__(self, tokenizer, chars: int = CHARS, margin: int = MARGIN) -> None:
        self.tokenizer, self.chars, self.margin = tokenizer, chars, margin
        self.text, self.origin = "", 0  # self.text is the document's characters from `origin` on
        self.head: _Window | None = None  # the window whose tokens from `first` on are not given out yet
        self.whole = not getattr(tokenizer, "is_fast", False)  # no offsets: the document is tokenized whole

    def add(self, piece: str) -> Iterator[list[int]]:
        self.text += piece
        yield from self._advance(ended=False)

    def finish(self) -> Iterator[list[int]]:
        yield from self._advance(ended=True)
        self.text, self.head = "", None

    def _advance(self, ended: bool) -> Iterator[list[int]]:
        while True:
            available = self.origin + len(self.text)
            if self.whole:
                if ended:
                    yield from self._rest()
                return
            if self.head is None:  # the document's first window
                if available < self.chars + 2 * self.margin and not ended:
                    return
                self.head = self._tokenize(0, self.chars + 2 * self.margin)
            head = self.head
            if head.end >= available and ended:  # the window reaches the document's end: the rest is its tokens
                yield head.ids[head.first :]
                self.text, self.origin, self.head = "", available, None
                return
            cut = self._cut(head)
            if cut is None:
                self.whole = True
                continue
            start, end = head.starts[cut] - self.margin, head.starts[cut] + self.chars + 2 * self.margin
            if available < end and not ended:
                return
            following = self._tokenize(start, end)
            following.first = self._agreed(head, cut, following)
            if following.first < 0:
                self.whole = True
                continue
            yield head.ids[head.first : cut]
            self.text, self.origin = self.text[start - self.origin :], start
            self.head = following

    def _tokenize(self, start: int, end: int) -> _Window:
        """The tokens of the document's characters [start, end) (to the end of the text so far)."""
        text = self.text[start - self.origin : end - self.origin]
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = encoded["offset_mapping"]
        return _Window(start, start + len(text), list(encoded["input_ids"]), [start + s for s, _ in offsets],
                       [start + e for _, e in offsets])  # fmt: skip

    def _cut(self, window: _Window) -> int | None:
        """The index of the first token at least `chars` past the window's given-out start that begins a word
        (starts at or right after whitespace) and begins after the token before it, within the window's interior;
        None when there is none."""
        low = window.starts[window.first] + self.chars if window.first < len(window.ids) else window.end
        high = window.end - self.margin
        text, origin = self.text, self.origin
        for index in range(max(window.first, 1), len(window.ids)):
            start = window.starts[index]
            if start > high:
                return None
            if start < low or start <= window.starts[index - 1]:
                continue
            if text[start - origin].isspace() or text[start - origin - 1].isspace():
                return index
        return None

    def _agreed(self, head: _Window, cut: int, following: _Window) -> int:
        """The index in `following` of the token at `head`'s cut when both windows hold the same tokens within
        `margin / 2` of it, else -1."""
        at = head.starts[cut]

        def near(window: _Window) -> list[tuple[int, int, int]]:
            return [(i, s, e) for i, s, e in zip(window.ids, window.starts, window.ends)
                    if at - self.margin // 2 <= s < at + self.margin // 2]  # fmt: skip

        if near(head) != near(following) or at not in following.starts:
            return -1
        return following.starts.index(at)

    def _rest(self) -> Iterator[list[int]]:
        """Fallback: the document from the last agreed cut to its end, tokenized whole."""
        if self.head is None:
            yield list(self.tokenizer(self.text, add_special_tokens=False)["input_ids"])
            return
        head = self.head
        whole = self._tokenize(head.start, self.origin + len(self.text))
        agreed = [(i, s) for i, s in zip(whole.ids, whole.starts) if s >= head.starts[head.first]][:1]
        mine = list(zip(head.ids, head.starts))[head.first : head.first + 1]
        if mine and agreed != mine:
            raise SinkscopeError(
                "the tokenizer's choice at character "
                f"{head.starts[head.first]} of a document depends on more than {self.margin} characters around it; "
                "split the document with blank lines"
            )
        yield whole.ids[whole.starts.index(head.starts[head.first]) if mine else len(whole.ids) :]
