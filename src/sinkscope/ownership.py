"""What sinkscope may delete or replace: only what it can prove it wrote (docs/reliability.md).

Every result directory sinkscope writes (analyze and cost runs, ablations, train-bb runs, exports, reproduce
sections) holds `.sinkscope-result.json`, a marker with sinkscope's own keys: `{"sinkscope": "result", "kind": ...,
"entries": [every file and folder written, relative to the directory]}`. A directory is *owned* when its marker is
valid and every path inside it is one of its entries, a sinkscope page (report.html rewritten by `sinkscope report`)
or inside an owned export folder. A file merely *named* `run.json` proves nothing; neither does an older result
without a marker: `--overwrite` refuses both, in one line that says why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER = ".sinkscope-result.json"
_KEY = "sinkscope"
_RESULT = "result"
# What `sinkscope ... --out FILE` may replace: a page its page builder wrote (templates/base.html.j2).
PAGE_MARKER = b'<meta name="generator" content="sinkscope'
# Results that may sit inside another result and go with it (an export of a run, into RUN/csv by default).
DERIVED_KINDS = ("export",)


def _walk(directory: Path) -> list[str]:
    """Every file and folder under `directory` as a relative posix path (symbolic links are listed, not followed)."""
    paths = []
    for root, folders, files in os.walk(directory, followlinks=False):
        relative = Path(root).relative_to(directory)
        paths += [(relative / name).as_posix() for name in (*folders, *files)]
    return sorted(p for p in paths if p != MARKER)


def write_marker(directory: str | Path, kind: str) -> None:
    """Stamp `directory` (a finished result, before it is renamed into place) with the marker listing its entries."""
    directory = Path(directory)
    marker = {_KEY: _RESULT, "kind": kind, "entries": _walk(directory)}
    (directory / MARKER).write_text(json.dumps(marker, indent=1))


def read_marker(directory: str | Path) -> dict | None:
    """The marker of `directory` when it is one sinkscope wrote (its own keys, a list of entries), else None."""
    try:
        marker = json.loads((Path(directory) / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(marker, dict) or marker.get(_KEY) != _RESULT or not isinstance(marker.get("entries"), list):
        return None
    return marker


def register(directory: str | Path, *names: str) -> None:
    """Add files written into the owned `directory` after its marker (e.g. reproduce's key file) to its entries."""
    marker = read_marker(directory)
    if marker is None:
        return
    marker["entries"] = sorted(set(marker["entries"]) | set(names))
    (Path(directory) / MARKER).write_text(json.dumps(marker, indent=1))


def is_page(path: Path) -> bool:
    """Whether the file `path` is a page of sinkscope's page builder (its generator marker near the top)."""
    try:
        with open(path, "rb") as handle:
            return PAGE_MARKER in handle.read(4096)
    except OSError:
        return False


def foreign_entries(directory: str | Path) -> list[str] | None:
    """Paths inside `directory` that sinkscope did not write (empty when it may be replaced whole); None when the
    directory has no valid marker at all."""
    directory = Path(directory)
    marker = read_marker(directory)
    if marker is None:
        return None
    entries = set(marker["entries"])
    derived = [
        path for path in _walk(directory)
        if path not in entries and (directory / path).is_dir() and not (directory / path).is_symlink()
        and (read_marker(directory / path) or {}).get("kind") in DERIVED_KINDS
        and foreign_entries(directory / path) == []
    ]  # fmt: skip
    foreign = []
    for path in _walk(directory):
        if path in entries or any(path == d or path.startswith(d + "/") for d in derived):
            continue
        if "/" not in path and (directory / path).is_file() and is_page(directory / path):
            continue  # report.html drawn into the run later by `sinkscope report`
        foreign.append(path)
    return foreign


def owned(directory: str | Path) -> bool:
    """Whether `directory` is one whole result sinkscope wrote, with nothing else inside (so it may be replaced)."""
    return foreign_entries(directory) == []


def kind_of(directory: str | Path) -> str | None:
    marker = read_marker(directory)
    return None if marker is None else str(marker.get("kind"))


def holds_only_results(folder: Path) -> bool:
    """Whether `folder` is a result sinkscope wrote (a valid marker) or holds, besides hidden entries, only such
    results and folders of them, at least one (a grid's run, a run's seeds, a sweep's cells)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    if read_marker(folder) is not None:
        return True
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return bool(entries) and all(holds_only_results(p) for p in entries)


def is_workspace(directory: str | Path, kind: str, names: tuple[str, ...]) -> bool:
    """Whether the existing folder `directory` may be continued by a command that fills it over several runs and
    rewrites its own tables there (`sweep`, a `train-bb` grid): empty, stamped as `kind`, or, written before such
    folders carried a marker, unstamped and holding besides hidden entries only that command's own top-level `names`
    and folders of sinkscope results (`holds_only_results`), at least one. A folder merely holding a file or folder
    of one of those names is not one: it is the user's."""
    directory = Path(directory)
    if read_marker(directory) is not None:
        return kind_of(directory) == kind
    entries = [p for p in directory.iterdir() if not p.name.startswith(".")]
    if not entries:
        return True
    results = [p for p in entries if p.name not in names and holds_only_results(p)]
    return bool(results) and all(p.name in names or p in results for p in entries)



@contextmanager
def stamped(directory: str | Path, kind: str) -> Iterator[None]:
    """Stamp the claimed `directory` as `kind` unless it carries a marker already, for the block that fills it; a new
    stamp is taken off again when the block left nothing else there (a refused or interrupted first run leaves no
    folder behind)."""
    directory = Path(directory)
    new = read_marker(directory) is None
    if new:
        write_marker(directory, kind)
    try:
        yield
    finally:
        if new and [p.name for p in directory.iterdir()] == [MARKER]:
            (directory / MARKER).unlink()
