"""A text corpus file read in chunks (issue 32, item 10): never held whole, read only as far as it is consumed.

The documents are those of the whole file: its text (UTF-8, each run of bytes that do not decode replaced by one
U+FFFD) split at every blank line (`text.split("\\n\\n")`), each block stripped of surrounding whitespace, empty
blocks skipped. Here they come as pieces of about `CHUNK_BYTES` each, so a file without blank lines (one document of
any size) costs one chunk of memory. Whether the file is text (`sources.decode_text`'s rule) is judged on the part
read so far.
"""

from __future__ import annotations

import codecs
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from sinkscope.errors import SinkscopeError

CHUNK_BYTES = 1 << 20
MAX_BAD_FRACTION = 0.01  # as sources.MAX_BAD_FRACTION: above this share of bad bytes or controls a file is not text


UNDECODABLE = re.compile("[\udc80-\udcff]+")  # bytes that did not decode, as errors="surrogateescape" writes them
CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f]+")  # C0 controls except tab, newlines, form feed


class _Judge:
    """Counts undecodable bytes and control characters of the text read so far; refuses it as `decode_text` does
    (more than 1% of either, or any NUL) and remembers where the first bad byte was for the warning."""

    def __init__(self, path: Path) -> None:
        self.path, self.bytes, self.chars, self.bad, self.control, self.lines = path, 0, 0, 0, 0, 0
        self.first_bad: str | None = None
        self.first_control: str | None = None

    def add(self, text: str) -> None:
        bad, control = sum(map(len, UNDECODABLE.findall(text))), sum(map(len, CONTROL.findall(text)))
        if bad and self.first_bad is None:
            self.first_bad = self._where(text, UNDECODABLE.search(text).start())
        if control and self.first_control is None:
            self.first_control = self._where(text, CONTROL.search(text).start())
        self.bad, self.control = self.bad + bad, self.control + control
        self.bytes += len(text.encode("utf-8", errors="surrogateescape"))
        self.chars += len(text)
        self.lines += text.count("\n")
        if self.bad > MAX_BAD_FRACTION * self.bytes:
            raise SinkscopeError(
                f"corpus {self.path} is not UTF-8 text: {self.bad / self.bytes:.1%} of {self.bytes} bytes (read so far) do "
                f"not decode ({self.first_bad}); convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
            )
        if self.control > MAX_BAD_FRACTION * self.chars or "\x00" in text:
            raise SinkscopeError(
                f"corpus {self.path} is not text: {self.control / self.chars:.1%} of its {self.chars} characters read "
                f"so far are control characters or NUL ({self.first_control}); pass a UTF-8 text or .jsonl file"
            )

    def _where(self, text: str, index: int) -> str:
        byte = self.bytes + len(text[:index].encode("utf-8", errors="surrogateescape"))
        return f"first at byte {byte}, line {self.lines + text.count(chr(10), 0, index) + 1}"

    def warn(self) -> None:
        if self.bad:
            print(f"sinkscope: warning: corpus {self.path}: {self.bad} bytes are not UTF-8 and were replaced by U+FFFD "
                  f"({self.first_bad})", file=sys.stderr)  # fmt: skip


class _Blocks:
    """Turns the pieces of one blank-line block into the pieces of its stripped document: leading whitespace of the
    block is dropped, trailing whitespace of a piece is held until text follows it in the same block."""

    def __init__(self) -> None:
        self.started, self.pending = False, ""

    def piece(self, text: str) -> Iterator[tuple[str, bool]]:
        new = not self.started
        if new:
            text = text.lstrip()
            if not text:
                return
            self.started = True
        text = self.pending + text
        core = text.rstrip()
        self.pending = text[len(core) :]
        if core:
            yield core, new

    def end(self, text: str) -> Iterator[tuple[str, bool]]:
        yield from self.piece(text)
        self.started, self.pending = False, ""


def _replaced(text: str) -> str:
    """Each run of undecodable bytes as one U+FFFD (as `decode_text`)."""
    return UNDECODABLE.sub("\ufffd", text)


def text_pieces(path: Path) -> Iterator[tuple[str, bool]]:
    """The documents of text file `path` as `(piece, starts_a_document)`, read `CHUNK_BYTES` at a time (module doc).
    Joining each document's pieces gives exactly the document the whole file would."""
    chunk_bytes = CHUNK_BYTES
    judge, blocks = _Judge(path), _Blocks()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")  # a character cut by a chunk waits
    buffer = ""
    try:
        with open(path, "rb") as handle:
            while True:
                data = handle.read(chunk_bytes)
                text = decoder.decode(data, final=not data)
                judge.add(text)
                buffer += text
                start = 0
                while (cut := buffer.find("\n\n", start)) >= 0:  # every whole block of this chunk
                    yield from blocks.end(_replaced(buffer[start:cut]))
                    start = cut + 2
                buffer = buffer[start:]
                if not data:
                    yield from blocks.end(_replaced(buffer))
                    return
                cut = len(buffer) - 1  # the last character may begin a blank line: it waits for the next chunk
                while cut > 0 and UNDECODABLE.match(buffer, cut - 1):  # a run of bad bytes becomes one U+FFFD: keep it whole
                    cut -= 1
                if cut > 0:
                    yield from blocks.piece(_replaced(buffer[:cut]))
                    buffer = buffer[cut:]
    finally:
        judge.warn()
