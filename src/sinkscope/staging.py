"""Result directories and files appear whole or not at all, and nothing else is ever lost.

* `claimed_output(out, overwrite)`: at the start of a command, create `out` (so an unwritable place fails before
  any work), refuse to replace anything that is not a sinkscope result, and hold a lock beside it so a second
  concurrent writer is refused instead of silently replacing the first one's result.
* `staged_directory(out)` / `staged_file(path)`: write in a hidden sibling (`.NAME.partial-PID-*`,
  `.NAME.tmp-PID`), then rename into place; on an exception the sibling is removed.
* Siblings left by a process that was killed (SIGKILL leaves no chance to clean up) are removed by the next
  command that writes the same result; the PID in their name tells a dead writer from a live one.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sinkscope.errors import SinkscopeError

# The file every kind of result directory holds: analyze and cost runs, ablations, train-bb runs.
MARKERS = ("run.json", "ablation.json", "summary.json")
_TEMPORARY = re.compile(r"\.(?:partial|tmp)-(\d+)(?:-|$)")


def is_result_directory(directory: Path) -> bool:
    """Whether `directory` was written by sinkscope (so `--overwrite` may replace it)."""
    return any((Path(directory) / name).is_file() for name in MARKERS)


def check_replaceable(directory: str | Path, overwrite: bool) -> None:
    """Refuse an existing non-empty `directory` unless `overwrite`, and refuse `overwrite` of anything that is
    not a sinkscope result (an empty directory is always fine)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise SinkscopeError(f"--out {directory} exists and is not a directory; choose another --out")
    if directory.is_dir() and any(directory.iterdir()):
        if not overwrite:
            raise SinkscopeError(f"--out {directory} already exists; choose another directory or pass --overwrite")
        if not is_result_directory(directory):
            raise SinkscopeError(
                f"--out {directory} holds files that are not a sinkscope result (no run.json), so --overwrite "
                "will not delete it; choose another --out or empty it yourself"
            )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def clean_stale(target: str | Path) -> list[Path]:
    """Remove the staging siblings of `target` (`.NAME.partial-PID-*`, `.NAME.tmp-PID`) whose process is dead;
    print one line for each removed one and for any whose owner cannot be told. Returns the removed paths."""
    target = Path(target)
    if not target.parent.is_dir():
        return []
    removed = []
    for path in sorted(target.parent.glob(f".{glob_escape(target.name)}.*")):
        suffix = path.name[len(target.name) + 1 :]
        if not suffix.startswith((".partial-", ".tmp-")):
            continue
        match = _TEMPORARY.match(suffix)
        if match is None:
            print(f"sinkscope: note: {path} looks like a temporary of an interrupted sinkscope run; "
                  "delete it if no sinkscope is running", file=sys.stderr)  # fmt: skip
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        print(f"sinkscope: removed {path}, left behind by process {pid} that no longer runs", file=sys.stderr)
        removed.append(path)
    return removed


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


@contextmanager
def claimed_output(directory: str | Path, overwrite: bool = False, resume: bool = False) -> Iterator[Path]:
    """Create result directory `directory` now and hold `.NAME.lock` beside it until the block ends.

    Raises a `SinkscopeError` before any work when the directory cannot be created or written, exists and may not
    be replaced, or another process holds its lock. If the block raises and the directory was created here and is
    still empty, it is removed again. `resume=True` (a grid filled run by run, whose caller checked what the folder
    holds) skips the replace check and only takes the lock.
    """
    directory = Path(directory)
    if not resume:
        check_replaceable(directory, overwrite)
    clean_stale(directory)
    created = not directory.exists()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-")  # can we write inside?
        probe.close()
        handle = open(directory.with_name(f".{directory.name}.lock"), "a+")  # held until the block ends
    except OSError as err:
        if created and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
        raise SinkscopeError(
            f"cannot write --out {directory}: {err.strerror or err}; choose a directory you can write"
        ) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "?"
            raise SinkscopeError(
                f"--out {directory} is being written by another sinkscope process (pid {owner}); wait for it to "
                "finish or choose another --out"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield directory
        except BaseException:
            if created and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
            raise
        finally:
            Path(handle.name).unlink(missing_ok=True)  # unlinked while still locked: no window for a second writer
    finally:
        handle.close()


@contextmanager
def staged_directory(directory: str | Path) -> Iterator[Path]:
    """Yield an empty staging directory beside `directory`.

    When the block finishes, the staging directory replaces `directory`; when it
    raises, it is removed, so a crash or Ctrl-C never leaves a half-written result behind. An existing non-empty
    `directory` is replaced only if it is a sinkscope result.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(directory)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.partial-{os.getpid()}-"))
    try:
        yield staging
        staging.chmod(0o755)  # mkdtemp makes it private
        if directory.exists():
            check_replaceable(directory, overwrite=True)
            shutil.rmtree(directory)
        staging.rename(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_file_target(path: str | Path) -> None:
    """Refuse a file `--out` that names a directory or lies in a folder that does not exist."""
    path = Path(path)
    if path.is_dir():
        raise SinkscopeError(f"--out {path} is a directory; name a file, e.g. {path / 'report.html'}")
    if not path.parent.is_dir():
        raise SinkscopeError(f"--out {path}: folder {path.parent} does not exist; create it or choose another --out")


@contextmanager
def staged_file(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling `.NAME.tmp-PID` to write; it replaces `path` when the block finishes and is
    removed when it raises. `path` naming a directory or lying in a missing folder is refused first."""
    path = Path(path)
    check_file_target(path)
    clean_stale(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise SinkscopeError(f"cannot write {path}: {err.strerror or err}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
