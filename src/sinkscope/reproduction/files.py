"""The reproduction's own directories (section results, tables, figures): written whole or not at all, and
stamped with the settings they were computed with, so a rerun can tell a finished section from a stale one.

What a key holds: plain values (numbers, strings, lists, nested dicts) and, for the options of a pipeline, the
config dataclass itself (`AnalyzeConfig`, `AblateConfig`), stamped with every field spelled out. A stored stamp
matches a key when every value it records equals the value now (`_matches`); a config field the stamp lacks (an
option added after the stamp was written) matches when its value now is the field's default. So an option added
later with a default that keeps the old behaviour changes no key, while changing a default leaves every stamp that
recorded the old value stale. The one case left to the developer: an option added with one default whose default
later changes — stamps written before the option existed read as its current default.

The model and corpus a section reads enter its key as their identity by content (`sinkscope.identity`): a model's
weights, config and tokenizer files, a corpus's text, and their resolved paths. The stamp also lists every file the
section stored, with its size and sha256, so a section whose files were deleted or cut short since is computed
again (one line says so) instead of failing on read. The stamp and the section's ownership record are each
replaced whole (staged beside the folder, then renamed), the record first: a kill between the two leaves a folder
that is stale and still sinkscope's, never one that no rerun may replace.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sinkscope.identity import describe_changes
from sinkscope.locking import temporary_file
from sinkscope.ownership import MARKER, foreign_entries, read_marker
from sinkscope.staging import staged_directory


@contextmanager
def swapped_directory(directory: Path) -> Iterator[Path]:
    """Yield an empty sibling to write; when the block finishes it replaces `directory` (`staging.staged_directory`:
    under the lock, stamped with the ownership marker, and only over a section sinkscope wrote), when it raises it
    is removed and `directory` is left as it was."""
    with staged_directory(directory, kind="reproduce-section") as staging:
        yield staging


KEY_FILE = "reproduce-key.json"  # in every section directory: the settings it was computed with


def log(message: str) -> None:
    """One progress line on stderr (tqdm bars of the analyses appear between them)."""
    print(f"[reproduce {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _json(value):
    return json.loads(json.dumps(value, sort_keys=True, default=_encode))


def _defaults(config_type: type) -> dict:
    """{field: its default, as JSON} of a dataclass type (fields without a default are left out)."""
    out = {}
    for f in dataclasses.fields(config_type):
        if f.default is not dataclasses.MISSING:
            out[f.name] = _json(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = _json(f.default_factory())
    return out


def _encode(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}  # every field spelled out
    return str(value)


def _normal(key: dict) -> dict:
    return _json(key)


def _matches(stamp, key) -> bool:
    """Whether the stored `stamp` (JSON) records the settings `key` holds now: equal values everywhere, except that
    a config field the stamp lacks (an option added after it was written) matches when its value now is the
    field's default (module docstring)."""
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        names = [f.name for f in dataclasses.fields(key)]
        if not isinstance(stamp, dict) or set(stamp) - set(names):
            return False  # a stamp that is not a config, or holds a field the config no longer has
        defaults = _defaults(type(key))
        return all(
            _matches(stamp[name], getattr(key, name)) if name in stamp
            else name in defaults and _json(getattr(key, name)) == defaults[name]
            for name in names
        )
    if isinstance(key, dict):
        return isinstance(stamp, dict) and set(stamp) == {str(name) for name in key} and all(
            _matches(stamp[str(name)], value) for name, value in key.items()
        )
    if isinstance(key, (list, tuple)):
        return isinstance(stamp, list) and len(stamp) == len(key) and all(map(_matches, stamp, key))
    return stamp == _json(key)


def _stored_files(directory: Path) -> dict[str, list]:
    """{relative path: [size, sha256]} of every file a section stored (its stamp and ownership record aside)."""
    import hashlib

    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        name = path.relative_to(directory).as_posix()
        if name not in (KEY_FILE, MARKER):
            files[name] = [path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()]
    return files


def _damaged(directory: Path, stored: dict) -> list[str]:
    """The files of `stored` (`_stored_files` when the stamp was written) that are gone or differ now."""
    import hashlib

    damaged = []
    for name, (size, sha256) in stored.items():
        path = directory / name
        if not path.is_file() or path.stat().st_size != size or hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
            damaged.append(name)
    return damaged


def _read_stamp(directory: Path) -> tuple[object, dict | None] | None:
    """(the identity a stamp records, its stored files or None for a stamp written before they were listed), or None
    when the stamp is damaged (not UTF-8 JSON), which is said in one line."""
    try:
        stamp = json.loads((directory / KEY_FILE).read_bytes().decode("utf-8"))
    except (OSError, ValueError) as err:  # ValueError: not UTF-8 (UnicodeDecodeError) or not JSON
        log(f"{directory}: its stored key {KEY_FILE} is damaged ({type(err).__name__}): computing the section again")
        return None
    if isinstance(stamp, dict) and set(stamp) == {"identity", "stored"}:
        stored = stamp["stored"]
        if not isinstance(stored, dict) or not all(
            isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and isinstance(entry[1], str)
            for entry in stored.values()
        ):
            log(f"{directory}: its stored key {KEY_FILE} is damaged (its list of stored files): computing the section "
                "again")  # fmt: skip
            return None
        return stamp["identity"], stored
    return stamp, None


def is_fresh(directory: Path, key: dict) -> bool:
    """Whether `directory` holds a finished section computed with these settings on inputs of this content
    (`_matches` on its stamp) whose stored files are all still there as written. A stale or damaged section gets
    one line saying what changed; it is then computed again."""
    if not (directory / KEY_FILE).is_file():
        return False
    _recover_record(directory)
    read = _read_stamp(directory)
    if read is None:
        return False
    identity, stored = read
    if not _matches(identity, key):
        log(f"{directory}: stored with other inputs or settings ({describe_changes(identity, _normal(key))}): "
            "computing it again")
        return False
    damaged = _damaged(directory, stored or {})
    if damaged:
        log(f"{directory}: stored files are missing or changed since they were written ({', '.join(damaged[:3])}): "
            "computing the section again")
        return False
    return True


def _replace_whole(path: Path, text: str) -> None:
    """Write `path` (inside a section folder) whole: staged beside the folder (`.NAME.tmp-PID@TAG`, which the next
    writer of the folder recovers), then renamed over `path`."""
    staged = temporary_file(path.parent)
    try:
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, path)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise


def _record(directory: Path) -> None:
    """List the stamp in the folder's ownership record (whole, before the stamp exists: a kill in between leaves a
    listed file missing, which a rerun may replace)."""
    marker = read_marker(directory)
    if marker is not None and KEY_FILE not in marker["entries"]:
        _replace_whole(directory / MARKER, json.dumps({**marker, "entries": sorted({*marker["entries"], KEY_FILE})},
                                                     indent=1))  # fmt: skip


def _recover_record(directory: Path) -> None:
    """A stamp that a kill left out of the folder's ownership record (written by a sinkscope that wrote the stamp
    first) is listed now, when it is the only file the record lacks, so the section can be replaced again."""
    if foreign_entries(directory) == [KEY_FILE]:
        _record(directory)


def write_key(directory: Path, key: dict) -> None:
    """Mark `directory` as a finished section computed with `key` (written last, after the section is whole): its
    identity and the size and sha256 of every file it stored, recorded in its ownership marker first."""
    stored = _stored_files(directory)
    _record(directory)
    _replace_whole(directory / KEY_FILE, json.dumps({"identity": _normal(key), "stored": stored}, indent=2,
                                                    sort_keys=True))  # fmt: skip
