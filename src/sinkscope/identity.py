"""A stored result's identity, in one place: what its inputs *are*, by content, so that a result is reused only for
the same inputs' content (docs/reliability.md, "What a stored result's identity holds").

Every reuse asks these functions: `reproduce`'s sections (`reproduction.sections.inputs`), `sweep` cells
(`pipelines.sweep.cell_content`) and a `--resume` (the model identity recorded in the checkpoint's fingerprint);
each reaches the model's through `models.load.weights_identity`, which adds the sha256 an embedded model is pinned
to. A train-bb grid run's identity is its whole configuration and the sha256 of the text file its bigram is read from,
if any (`config.json`, `synthetic.experiments.trained_with`), asked by `--grid FILE` and `--grid regimes` alike.

* `model_identity(name)`: an embedded model is its name and the sha256 the release pins (checked on every load);
  a model folder or `.gguf` file is its resolved path and the sha256 of every file that decides its numbers
  (`model_files`: weights, weight index, config, and every tokenizer file); a hub id is its name (the hub cache is
  content-addressed).
* `corpus_identity(source)`: a corpus file or folder is its resolved path, the sha256 over each file's relative name
  and content, and the number of files; a built-in corpus is its name and the Python version whose standard library
  it is read from; an `hf:` dataset is its name.
* `content_sha256(path)`: the sha256 of a file's bytes, read once per version of the file. The digest is cached by
  (resolved path, device, inode, size, mtime_ns, ctime_ns) in memory and on disk under
  `$SINKSCOPE_CACHE/content-sha256/` (default `~/.cache/sinkscope/content-sha256/`), one small JSON file per path.
  The change time (ctime) cannot be set back by a program (`os.utime` sets only the access and modification
  times), so a file rewritten in place with its size and modification time restored, or a copy made with
  preserved times, is hashed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin")
# Files besides the weights whose content changes a model's numbers: its config and everything the tokenizer reads
# (names starting with "tokenizer" count too: tokenizer.json, tokenizer_config.json, tokenizer.model, ...).
MODEL_FILE_NAMES = frozenset({
    "config.json", "model.safetensors.index.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "merges.txt", "vocab.txt", "spiece.model", "sentencepiece.bpe.model", "chat_template.jinja", "chat_template.json",
})  # fmt: skip

_MEMORY: dict[tuple, str] = {}  # stat key -> sha256, for this process


def cache_root() -> Path:
    """sinkscope's cache folder: `$SINKSCOPE_CACHE`, else `~/.cache/sinkscope` (GGUF conversions, content digests)."""
    return Path(os.environ.get("SINKSCOPE_CACHE", Path.home() / ".cache" / "sinkscope"))


def _stat_key(path: Path) -> tuple:
    stat = path.stat()
    return (str(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _cache_file(path: Path) -> Path:
    name = hashlib.sha256(str(path).encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return cache_root() / "content-sha256" / f"{name}.json"


def _read_cached(path: Path, key: tuple) -> str | None:
    try:
        record = json.loads(_cache_file(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("stat") != list(key) or not isinstance(record.get("sha256"), str):
        return None
    return record["sha256"]


def _write_cached(path: Path, key: tuple, digest: str) -> None:
    """Store the digest (staged and renamed, so a reader never sees half a record); a cache that cannot be written
    only costs a hash on the next run."""
    target = _cache_file(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"stat": list(key), "sha256": digest}), encoding="utf-8")
        os.replace(tmp, target)
    except OSError:  # no cache (SINKSCOPE_CACHE a file, a full disk, no permission): nothing is kept
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def content_sha256(path: str | Path) -> str:
    """sha256 of the bytes of file `path`, hashed once per (path, device, inode, size, mtime_ns, ctime_ns)."""
    path = Path(os.path.realpath(Path(path).expanduser()))
    key = _stat_key(path)
    digest = _MEMORY.get(key) or _read_cached(path, key)
    if digest is None:
        hasher = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                hasher.update(chunk)
        digest = hasher.hexdigest()
        if _stat_key(path) == key:  # unchanged while it was read: the digest is of this version
            _write_cached(path, key, digest)
    _MEMORY[key] = digest
    return digest


def model_files(directory: Path) -> list[Path]:
    """The files of a model folder that decide its numbers: weights (`.safetensors`, `.gguf`, `.bin`), the weight
    index, `config.json` and every tokenizer file (`MODEL_FILE_NAMES`, names starting with `tokenizer`)."""
    return sorted(
        p for p in directory.iterdir()
        if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name in MODEL_FILE_NAMES or p.name.startswith("tokenizer"))
    )  # fmt: skip


def _existing(text: str) -> Path | None:
    try:
        path = Path(text).expanduser()
        return path if path.exists() else None
    except (ValueError, RuntimeError, OSError):  # a NUL byte, `~user` of no user: not a file
        return None


def model_identity(name_or_path: str, pinned_sha256: str | None = None) -> dict:
    """What model `name_or_path` is, by content (module docstring): `{"embedded", "sha256"}` for an embedded model
    (`pinned_sha256`, given by `models.load.weights_identity`, which knows them), `{"path", "files": {name: sha256}}`
    for a folder or a single file, or `{"hub"}`."""
    if pinned_sha256 is not None:
        return {"embedded": name_or_path, "sha256": pinned_sha256}
    path = _existing(name_or_path)
    if path is None:
        return {"hub": name_or_path}
    files = [path] if path.is_file() else model_files(path) if path.is_dir() else []
    return {"path": os.path.realpath(path), "files": {file.name: content_sha256(file) for file in files}}


def corpus_identity(source: str) -> dict:
    """What corpus `source` is, by content (module docstring): `{"path", "sha256", "files"}` for a file or folder,
    `{"builtin", "python"}` for a built-in corpus, `{"source"}` for an `hf:` dataset (or a path that does not
    exist, which the corpus check refuses before any work)."""
    if source.startswith("builtin:"):
        return {"builtin": source, "python": platform.python_version()}
    path = None if source.startswith("hf:") else _existing(source)
    if path is None:
        return {"source": source}
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for file in files:
        name = file.name if file == path else file.relative_to(path).as_posix()
        digest.update(f"{name}\0{content_sha256(file)}\0".encode("utf-8", "surrogatepass"))
    return {"path": os.path.realpath(path), "sha256": digest.hexdigest(), "files": len(files)}


def changes(saved: object, now: object, prefix: str = "") -> list[str]:
    """The dotted names of the values that differ between a stored identity and today's (`model.files.tokenizer.json`,
    `corpus.sha256`, `seq_len`), for the one line that says why a result is computed again."""
    if isinstance(saved, dict) and isinstance(now, dict):
        return [name for key in sorted(set(saved) | set(now), key=str)
                for name in changes(saved.get(key), now.get(key), f"{prefix}{key}.")]  # fmt: skip
    return [] if saved == now else [prefix.rstrip(".") or "everything"]


def describe_changes(saved: object, now: object, limit: int = 3) -> str:
    """`changes` as a short phrase: 'model.files.tokenizer.json, corpus.sha256 changed'."""
    names = changes(saved, now)
    shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    return f"{shown} changed"
