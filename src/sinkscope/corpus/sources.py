"""Text sources for a corpus (SPEC §1): files, directories, JSONL, `hf:` datasets and offline built-ins.

Every source is a lazy iterator of documents (strings), so a corpus of any size streams. Token-level controls
(`builtin:random`, `builtin:repeat`) have no text and are generated in `corpus/windows.py`.
"""

from __future__ import annotations

import ast
import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from sinkscope.errors import SinkscopeError

TEXT_SUFFIXES = (".txt", ".md", ".text")
JSONL_SUFFIXES = (".jsonl",)
TOKEN_CONTROLS = ("builtin:random", "builtin:repeat")
BUILTINS = ("builtin:code", "builtin:prose", *TOKEN_CONTROLS)


def documents(source: str) -> Iterator[str]:
    """Documents of a text source, in a deterministic order.

    `source` is a text file (documents separated by blank lines), a `.jsonl` file (`text` field per line), a
    directory of those (recursively, sorted), `hf:NAME[:config][:split]` (streamed), `builtin:code` (Python
    standard-library sources) or `builtin:prose` (their docstrings).
    """
    if source == "builtin:code":
        return (path.read_text(encoding="utf-8", errors="replace") for path in _stdlib_files())
    if source == "builtin:prose":
        return _stdlib_docstrings()
    if source.startswith("hf:"):
        return _hf_documents(source)
    if source.startswith("builtin:"):
        raise SinkscopeError(f"unknown built-in corpus '{source}'; choose one of {', '.join(BUILTINS)}")
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES + JSONL_SUFFIXES and p.is_file())
        if not files:
            raise SinkscopeError(f"corpus directory {path} holds no .txt, .md or .jsonl files")
        return (doc for file in files for doc in _file_documents(file))
    if not path.is_file():
        raise SinkscopeError(
            f"corpus '{source}' not found: pass a text/.jsonl file, a directory, hf:NAME or one of "
            f"{', '.join(BUILTINS)}"
        )
    return _file_documents(path)


def check_source(source: str) -> None:
    """Raise the clear error `documents` would, without reading the corpus."""
    if source not in TOKEN_CONTROLS:
        documents(source)


def _file_documents(path: Path) -> Iterator[str]:
    if path.suffix in JSONL_SUFFIXES:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    text = record["text"]
                except (json.JSONDecodeError, KeyError, TypeError) as err:
                    raise SinkscopeError(
                        f"{path}:{number}: each JSONL line must be an object with a 'text' field"
                    ) from err
                if text.strip():
                    yield text
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    for block in text.split("\n\n"):
        if block.strip():
            yield block.strip()


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
