"""One writer per result, and the leftovers of killed writers recovered under the lock (docs/reliability.md).

* `held(target)`: an exclusive `flock` on `.NAME.lock` beside `target`, whose text names the holder
  (`{"pid", "host", "tag"}`). A lock whose file names another host (or PID namespace) is never taken over: flock
  may not reach across a network file system, and that process's PID means nothing here.
* Temporaries are named `.NAME.partial-PID@TAG-*` and `.NAME.tmp-PID@TAG`, where TAG (`host_tag()`) stands for this
  host and PID namespace; only temporaries of this TAG whose PID no longer runs (or is this process's own PID but
  not one of its own temporaries: containers that always run as PID 1) are treated as left behind, and only by a
  process that holds the lock. Others (another TAG, the old `.NAME.partial-PID-*` names) are named in a note and
  left alone.
* A replacement interrupted between its two renames (`.NAME.partial-PID@TAG-old-*/NAME` holds the old result, the
  new one is whole in `.NAME.partial-PID@TAG-*`) is finished, never deleted: the whole new result is moved into place
  (the replacement the user asked for), or, when there is no whole new one, the old result is put back.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sinkscope.errors import SinkscopeError
from sinkscope.ownership import read_marker

_TEMPORARY = re.compile(r"\.(?:partial|tmp)-(\d+)@([0-9a-f]{8})(-old)?(?:-|$)")
_LEGACY = re.compile(r"\.(?:partial|tmp)-(\d+)(?:-|$)")
CREATED: set[str] = set()  # temporaries this process made (a fixed PID does not make another's ours)
_HELD: dict[str, object] = {}  # lock file -> open handle, for the locks this process holds


def host_tag() -> str:
    """8 hex digits for this host and PID namespace: sha256 of the host name and the PID namespace's inode."""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()[:8]


def temporary_prefix(target: Path, old: bool = False) -> str:
    """`.NAME.partial-PID@TAG-` (or `...-old-`), the prefix of a staging folder beside `target`."""
    return f".{target.name}.partial-{os.getpid()}@{host_tag()}-{'old-' if old else ''}"


def temporary_file(target: Path) -> Path:
    path = target.with_name(f".{target.name}.tmp-{os.getpid()}@{host_tag()}")
    CREATED.add(str(path))
    return path


def lock_file(target: Path) -> Path:
    """`.NAME.lock` beside `target` (by absolute path, so `runs/a` and `/home/u/runs/a` share one lock)."""
    target = Path(os.path.abspath(target))
    return target.with_name(f".{target.name}.lock")


def _holder(text: str) -> dict:
    try:
        holder = json.loads(text)
    except json.JSONDecodeError:
        holder = {"pid": text.strip() or "?"}
    return holder if isinstance(holder, dict) else {"pid": "?"}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def busy(target: Path) -> dict | None:
    """The holder of `target`'s lock when another process holds it (this process's own locks are not busy)."""
    path = lock_file(target)
    if str(path) in _HELD or not path.is_file():
        return None
    try:
        with open(path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                return _holder(handle.read())
            handle.seek(0)
            holder = _holder(handle.read())
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return None
    if holder.get("tag") not in (None, host_tag()):  # written on another host: its flock may not reach us
        return holder
    return None


def describe(holder: dict) -> str:
    host = f" on host {holder['host']}" if holder.get("host") and holder.get("tag") != host_tag() else ""
    return f"pid {holder.get('pid', '?')}{host}"


@contextmanager
def held(target: str | Path, reentrant: bool = False, wait: bool = False, what: str = "--out") -> Iterator[None]:
    """Hold `target`'s lock for the block; a lock another process holds is one line, or with `wait` (a shared
    cache) is waited for. `reentrant`: a lock this process already holds (a claimed --out whose result is now
    saved) is simply kept."""
    path = lock_file(Path(target))
    if reentrant and str(path) in _HELD:
        yield
        return
    holder = None if wait else busy(Path(target))
    if holder is not None:
        raise SinkscopeError(
            f"{target} is being written by another sinkscope process ({describe(holder)}); wait for it to finish or "
            f"choose another --out (if no sinkscope runs there any more, delete {path})"
        )
    try:
        handle = open(path, "a+")
    except OSError as err:
        raise SinkscopeError(f"cannot write {what} {target}: {err.strerror or err}; choose a folder you can write") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.seek(0)
            raise SinkscopeError(
                f"--out {target} is being written by another sinkscope process ({describe(_holder(handle.read()))}); "
                "wait for it to finish or choose another --out"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "tag": host_tag()}))
        handle.flush()
        _HELD[str(path)] = handle
        try:
            yield
        finally:
            _HELD.pop(str(path), None)
            path.unlink(missing_ok=True)  # unlinked while still locked: no window for a second writer
    finally:
        handle.close()


def is_held(target: Path) -> bool:
    return str(lock_file(Path(target))) in _HELD


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _left_behind(pid: int, path: Path) -> bool:
    if str(path) in CREATED:
        return False
    return pid == os.getpid() or not _pid_alive(pid)


def recover(target: str | Path) -> list[Path]:
    """Recover the temporaries that killed writers left beside `target` (call it only while holding the lock):
    finish an interrupted replacement, remove half-written ones, print one line for each. Returns the paths acted on."""
    target = Path(target)
    if not is_held(target):
        raise RuntimeError(f"recover({target}) without its lock")  # a bug: clean-up happens only under the lock
    if not target.parent.is_dir():
        return []
    tag, acted = host_tag(), []
    ours: dict[str, list[Path]] = {"old": [], "new": [], "tmp": []}
    for path in sorted(target.parent.glob(f".{glob_escape(target.name)}.*")):
        suffix = path.name[len(target.name) + 1 :]
        if not suffix.startswith((".partial-", ".tmp-")):
            continue
        match = _TEMPORARY.match(suffix)
        if match is None or match.group(2) != tag:
            legacy = _LEGACY.match(suffix)
            if match is not None or (legacy and int(legacy.group(1)) != os.getpid()):
                where = "of an older sinkscope" if match is None else "of a process on another host or PID namespace"
                print(f"sinkscope: note: {path} is a temporary {where}; it is left alone: delete it yourself if no "
                      "sinkscope is writing there", file=sys.stderr)  # fmt: skip
            continue
        if not _left_behind(int(match.group(1)), path):
            continue
        ours["tmp" if suffix.startswith(".tmp-") else "old" if match.group(3) else "new"].append(path)
    for new in ours["new"]:
        if not target.exists() and read_marker(new) is not None and not new.is_symlink():
            new.chmod(0o755)
            new.rename(target)
            print(f"sinkscope: finished an interrupted save: the whole result in {new} is now {target}",
                  file=sys.stderr)  # fmt: skip
        else:
            _remove(new)
            print(f"sinkscope: removed {new}, a half-written result of a process that no longer runs", file=sys.stderr)
        acted.append(new)
    for old in ours["old"]:
        inside = old / target.name
        if not target.exists() and inside.exists():
            inside.rename(target)
            print(f"sinkscope: put back {target} from {old}, where an interrupted replacement had moved it",
                  file=sys.stderr)  # fmt: skip
        if not any(old.iterdir()):
            old.rmdir()
        elif target.exists() and read_marker(target) is not None:  # the replacement had finished: the old is done
            _remove(old)
            print(f"sinkscope: removed {old}, the replaced result of a finished replacement", file=sys.stderr)
        acted.append(old)
    for tmp in ours["tmp"]:
        _remove(tmp)
        print(f"sinkscope: removed {tmp}, left behind by a process that no longer runs", file=sys.stderr)
        acted.append(tmp)
    return acted


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)
