"""The reproduction's own directories (section results, tables, figures): written whole or not at all, and
stamped with the settings they were computed with, so a rerun can tell a finished section from a stale one."""

from __future__ import annotations

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


def _normal(key: dict) -> dict:
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def is_fresh(directory: Path, key: dict) -> bool:
    """Whether `directory` holds a finished section computed with exactly these settings."""
    stamp = directory / KEY_FILE
    if not stamp.is_file():
        return False
    try:
        return json.loads(stamp.read_text()) == _normal(key)
    except (OSError, json.JSONDecodeError):
        return False


def write_key(directory: Path, key: dict) -> None:
    """Mark `directory` as a finished section computed with `key` (written last, after the section is whole)."""
    (directory / KEY_FILE).write_text(json.dumps(_normal(key), indent=2, sort_keys=True))
    register(directory, KEY_FILE)  # listed in the section's ownership marker: a rerun may replace it
