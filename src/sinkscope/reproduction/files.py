"""The reproduction's own directories (section results, tables, figures): written whole or not at all, and
stamped with the settings they were computed with, so a rerun can tell a finished section from a stale one.

What a key holds: plain values (numbers, strings, lists, nested dicts) and, for the options of a pipeline, the
config dataclass itself (`AnalyzeConfig`, `AblateConfig`), stamped with every field spelled out. A stored stamp
matches a key when every value it records equals the value now (`_matches`); a config field the stamp lacks (an
option added after the stamp was written) matches when its value now is the field's default. So an option added
later with a default that keeps the old behaviour changes no key, while changing a default leaves every stamp that
recorded the old value stale. The one case left to the developer: an option added with one default whose default
later changes — stamps written before the option existed read as its current default.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sinkscope.ownership import register
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


def is_fresh(directory: Path, key: dict) -> bool:
    """Whether `directory` holds a finished section computed with these settings (`_matches` on its stamp)."""
    stamp = directory / KEY_FILE
    if not stamp.is_file():
        return False
    try:
        return _matches(json.loads(stamp.read_text()), key)
    except (OSError, json.JSONDecodeError):
        return False


def write_key(directory: Path, key: dict) -> None:
    """Mark `directory` as a finished section computed with `key` (written last, after the section is whole)."""
    (directory / KEY_FILE).write_text(json.dumps(_normal(key), indent=2, sort_keys=True))
    register(directory, KEY_FILE)  # listed in the section's ownership marker: a rerun may replace it
