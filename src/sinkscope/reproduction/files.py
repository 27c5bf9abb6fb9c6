"""The reproduction's own directories (section results, tables, figures): written whole or not at all, and
stamped with the settings they were computed with, so a rerun can tell a finished section from a stale one.

What a key holds: plain values (numbers, strings, lists, nested dicts) and, for the options of a pipeline, the
config dataclass itself (`AnalyzeConfig`, `AblateConfig`). A config is stamped as **the fields whose value differs
from the field's default** (`config_fields`), and a stored stamp is read the same way: where the key holds a
config, the stamp's fields equal to that config class's current default are dropped before the comparison
(`stamped_as_now`). So an option added later with a default that keeps the old behaviour changes no key, and a
stamp written before the option existed (or written with every field spelled out) still matches. The one risk:
**changing a field's default changes what a stamp that omits the field means** (the stamp `{}` then reads as the
new default), so whoever changes a default of a config that a section's key holds must bump that section's
`version` (or the section will reuse numbers computed with the old default).
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


def config_fields(config) -> dict:
    """The fields of the dataclass instance `config` whose value differs from the field's default, as JSON (the
    form a key stamps a config in; module docstring)."""
    defaults = _defaults(type(config))
    values = {f.name: _json(getattr(config, f.name)) for f in dataclasses.fields(config)}
    return {name: value for name, value in values.items() if name not in defaults or value != defaults[name]}


def _encode(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_fields(value)
    return str(value)


def _normal(key: dict) -> dict:
    return _json(key)


def stamped_as_now(stamp, key):
    """`stamp` (a stored key, JSON) read as `key` would be stamped now: wherever `key` holds a config dataclass,
    the stamp's fields equal to that class's current default are dropped (module docstring)."""
    if dataclasses.is_dataclass(key) and not isinstance(key, type) and isinstance(stamp, dict):
        defaults = _defaults(type(key))
        return {
            name: value for name, value in stamp.items() if name not in defaults or value != defaults[name]
        }
    if isinstance(key, dict) and isinstance(stamp, dict):
        return {
            name: stamped_as_now(value, key[name]) if name in key else value for name, value in stamp.items()
        }
    return stamp


def is_fresh(directory: Path, key: dict) -> bool:
    """Whether `directory` holds a finished section computed with these settings (its stamp read by
    `stamped_as_now`)."""
    stamp = directory / KEY_FILE
    if not stamp.is_file():
        return False
    try:
        return stamped_as_now(json.loads(stamp.read_text()), key) == _normal(key)
    except (OSError, json.JSONDecodeError):
        return False


def write_key(directory: Path, key: dict) -> None:
    """Mark `directory` as a finished section computed with `key` (written last, after the section is whole)."""
    (directory / KEY_FILE).write_text(json.dumps(_normal(key), indent=2, sort_keys=True))
    register(directory, KEY_FILE)  # listed in the section's ownership marker: a rerun may replace it
