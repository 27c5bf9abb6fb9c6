"""Text sources for a corpus (SPEC §1): files, directories, JSONL, `hf:` datasets and offline built-ins.

Every source is a lazy iterator of documents (strings), so a corpus of any size streams; `document_pieces` gives
them in pieces, so one document of any size (a text file without blank lines) streams too. Token-level controls
(`builtin:random`, `builtin:repeat`) have no text and are generated in `corpus/windows.py`.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from sinkscope.corpus.text_file import CONTROL as _CONTROL
from sinkscope.corpus.text_file import MAX_BAD_FRACTION, text_pieces
from sinkscope.corpus.text_file import UNDECODABLE as _UNDECODABLE
from sinkscope.errors import SinkscopeError

TEXT_SUFFIXES = (".txt", ".md", ".text")
JSONL_SUFFIXES = (".jsonl",)
TOKEN_CONTROLS = ("builtin:random", "builtin:repeat")
BUILTINS = ("builtin:code", "builtin:prose", *TOKEN_CONTROLS)
SAMPLE_BYTES = 1 << 20  # how much of the first file `check_source` reads before the model loads


def documents(source: str) -> Iterator[str]:
    """Documents of a text source, in a deterministic order.

    `source` is a text file (documents separated by blank lines), a `.jsonl` file (`text` field per line), a
    directory of those (recursively, sorted), `hf:NAME[:config][:split]` (streamed), `builtin:code` (Python
    standard-library sources) or `builtin:prose` (their docstrings).
    """
    parts: list[str] = []
    for piece, new in document_pieces(source):
        if new and parts:
            yield "".join(parts)
            parts = []
        parts.append(piece)
    if parts:
        yield "".join(parts)


def document_pieces(source: str) -> Iterator[tuple[str, bool]]:
    """The documents of `source` (as `documents`) as `(piece, starts_a_document)`: a text file is read in chunks
    (`text_file.text_pieces`), so no document is ever held whole; other sources give each document as one piece.
    Raises the clear error of a missing or unknown source on the call, before any is read."""
    if source == "builtin:code":
        return ((path.read_text(encoding="utf-8", errors="replace"), True) for path in _stdlib_files())
    if source == "builtin:prose":
        return ((doc, True) for doc in _stdlib_docstrings())
    if source.startswith("hf:"):
        return ((doc, True) for doc in _hf_documents(source))
    if source.startswith("builtin:"):
        raise SinkscopeError(f"unknown built-in corpus '{source}'; choose one of {', '.join(BUILTINS)}")
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES + JSONL_SUFFIXES and p.is_file())
        if not files:
            raise SinkscopeError(f"corpus directory {path} holds no .txt, .md or .jsonl files")
        return (piece for file in files for piece in _file_pieces(file))
    if not path.is_file():
        raise SinkscopeError(
            f"corpus '{source}' not found: pass a text/.jsonl file, a directory, hf:NAME or one of "
            f"{', '.join(BUILTINS)}"
        )
    return _file_pieces(path)


def check_source(source: str) -> None:
    """Raise the clear error `documents` would, reading only the start of the first file: a missing source,
    a file that is not UTF-8 text, or a first JSONL line that is not a JSON object with a `text` string; for an
    `hf:` dataset, whatever opening its stream raises (so it fails before a model loads, not after)."""
    if source in TOKEN_CONTROLS:
        return
    if source.startswith("hf:"):  # open the stream now: no datasets package, no network, no such dataset
        next(_hf_documents(source), None)
        return
    document_pieces(source)
    path = Path(source).expanduser()
    if path.is_dir():
        path = next(p for p in sorted(path.rglob("*")) if p.suffix in TEXT_SUFFIXES + JSONL_SUFFIXES and p.is_file())
    if not path.is_file():
        return
    with open(path, "rb") as handle:
        sample = handle.read(SAMPLE_BYTES)
        if len(sample) == SAMPLE_BYTES:  # do not judge a character cut in half at the end of the sample
            sample = sample[: max(sample.rfind(b"\n") + 1, len(sample) - 4)]
        decode_text(sample, path, warn=False)
        if path.suffix in JSONL_SUFFIXES:
            handle.seek(0)
            for number, raw in enumerate(handle, 1):
                text = _replace_undecodable(raw)[0]
                if text.strip():
                    _jsonl_text(text, path, number)
                    break


def check_text(text: object, what: str = "text") -> str:
    """`text` when it is a string of valid Unicode text; one clear line for anything else (a number, bytes, a list)
    and for a command-line argument holding bytes that are not UTF-8 (Python passes them on as lone surrogates,
    which the tokenizer would reject only after the model loaded)."""
    if not isinstance(text, str):
        raise SinkscopeError(f"{what} must be a string, not {type(text).__name__}; pass the text itself")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise SinkscopeError(
            f"{what} is not valid UTF-8 (an undecodable byte at character {err.start}); pass UTF-8 text or put it in "
            "a file and use --file (its bad bytes are replaced and reported)"
        ) from None
    return text


def decode_text(data: bytes, path: Path, *, warn: bool = True) -> str:
    """The bytes of file `path` (from its start) as UTF-8 text, bytes that do not decode replaced by U+FFFD.

    Refuses data that is not text: any NUL byte, or more than 1% of bytes that do not decode or of control
    characters. With `warn`, prints one line naming how many bytes were replaced and where the first was.
    """
    text = data.decode("utf-8", errors="surrogateescape")  # each undecodable byte becomes one lone surrogate
    n_bad = sum(map(len, _UNDECODABLE.findall(text)))
    n_control = sum(map(len, _CONTROL.findall(text)))
    if n_bad > MAX_BAD_FRACTION * len(data):
        raise SinkscopeError(
            f"corpus {path} is not UTF-8 text: {n_bad / len(data):.1%} of {len(data)} bytes do not decode "
            f"({_where(text, _UNDECODABLE)}); convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        )
    if n_control > MAX_BAD_FRACTION * len(text) or "\x00" in text:
        raise SinkscopeError(
            f"corpus {path} is not text: {n_control / len(text):.1%} of its characters are control characters "
            f"or NUL ({_where(text, _CONTROL)}); pass a UTF-8 text or .jsonl file"
        )
    if n_bad and warn:
        print(f"sinkscope: warning: corpus {path}: {n_bad} bytes are not UTF-8 and were replaced by U+FFFD "
              f"({_where(text, _UNDECODABLE)})", file=sys.stderr)  # fmt: skip
    return _UNDECODABLE.sub("\ufffd", text)


def _where(text: str, pattern: re.Pattern) -> str:
    """'first at byte B, line L' for the first match of `pattern` in `text` (decoded with surrogateescape)."""
    start = pattern.search(text).start()
    byte = len(text[:start].encode("utf-8", errors="surrogateescape"))
    return f"first at byte {byte}, line {text.count(chr(10), 0, start) + 1}"


def _replace_undecodable(data: bytes) -> tuple[str, int]:
    """`data` as UTF-8 with each byte that does not decode replaced by U+FFFD, and how many were replaced."""
    text = data.decode("utf-8", errors="surrogateescape")
    return _UNDECODABLE.subn(lambda m: "\ufffd" * len(m.group()), text)


def _jsonl_text(line: str, path: Path, number: int) -> str:
    """The `text` field of one JSONL line, or a one-line error naming `path:number`."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise SinkscopeError(
            f"{path}:{number}: not valid JSON ({err.msg} at column {err.pos + 1}); a .jsonl corpus has one JSON "
            "object per line"
        ) from None
    if not isinstance(record, dict) or "text" not in record:
        kind = "an object without 'text'" if isinstance(record, dict) else f"a JSON {type(record).__name__}"
        raise SinkscopeError(f"{path}:{number}: each JSONL line must be an object with a 'text' field, this is {kind}")
    if not isinstance(record["text"], str):
        raise SinkscopeError(f"{path}:{number}: 'text' must be a string, not {type(record['text']).__name__}")
    return record["text"]


def _file_pieces(path: Path) -> Iterator[tuple[str, bool]]:
    """The documents of one text or `.jsonl` file, as `document_pieces`."""
    if path.suffix not in JSONL_SUFFIXES:
        yield from text_pieces(path)
        return
    replaced, first = 0, None
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            line, bad = _replace_undecodable(raw)
            replaced, first = replaced + bad, first or (number if bad else None)
            if not line.strip():
                continue
            text = _jsonl_text(line, path, number)
            if text.strip():
                yield text, True
    if replaced:
        print(f"sinkscope: warning: corpus {path}: {replaced} bytes are not UTF-8 and were replaced by U+FFFD "
              f"(first on line {first})", file=sys.stderr)  # fmt: skip


def _stdlib_files() -> list[Path]:
    """Top-level standard-library modules: real Python source present on every machine with Python."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))


def _stdlib_docstrings() -> Iterator[str]:
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc.split()) >= 8:  # skip one-liners: we want prose
                    yield doc


def _hf_documents(source: str) -> Iterator[str]:
    parts = source[3:].split(":")
    name, config, split = parts[0], (parts[1] if len(parts) > 1 and parts[1] else None), (
        parts[2] if len(parts) > 2 else "train"
    )
    try:
        import datasets
    except ImportError as err:
        raise SinkscopeError(f"corpus '{source}' needs the datasets package: pip install 'sinkscope[datasets]'") from err
    try:
        stream = datasets.load_dataset(name, config, split=split, streaming=True)
    except Exception as err:  # datasets raises connection, file and value errors alike
        raise SinkscopeError(
            f"could not open Hugging Face dataset '{name}' (config={config}, split={split}): "
            f"{str(err).splitlines()[0][:200]}; offline machines need a local file or a builtin: corpus"
        ) from err
    for record in stream:
        text = record.get("text")
        if isinstance(text, str) and text.strip():
            yield text
