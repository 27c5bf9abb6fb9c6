"""Result directories and files appear whole or not at all, and nothing else is ever lost.

* `claimed_output(out, overwrite)`: at the start of a command, create `out` (so an unwritable place fails before
  any work), refuse to replace anything that is not a sinkscope result, and hold a lock beside it so a second
  concurrent writer is refused instead of silently replacing the first one's result.
* `staged_directory(out)` / `staged_file(path)`: write in a hidden sibling (`.NAME.partial-PID-*`,
  `.NAME.tmp-PID`), then rename into place; on an exception the sibling is removed.
* Siblings left by a process that was killed (SIGKILL leaves no chance to clean up) are removed by the next
  command that writes the same result; the PID in their name tells a dead writer from a live one.
* A result is replaced only when the user asked (`--overwrite`) and it holds nothing but one sinkscope result: never
  a folder of other files, never results nested inside it, never a file that is not a sinkscope page.
* `--out` a symbolic link to a directory writes where the link points; the link itself stays.
* `safe_name(text)`: a folder name for user text (grid run names, sweep cells) that is one plain path component,
  so it stays inside `--out`, and distinct texts give distinct names.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sinkscope.errors import SinkscopeError

# The file every kind of result directory holds: analyze and cost runs, ablations, train-bb runs.
MARKERS = ("run.json", "ablation.json", "summary.json")
_TEMPORARY = re.compile(r"\.(?:partial|tmp)-(\d+)(?:-|$)")
# What `sinkscope ... --out FILE` may replace: a page its page builder wrote (templates/base.html.j2).
PAGE_MARKER = b'<meta name="generator" content="sinkscope'
_PLAIN = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,63}")


def safe_name(text: str) -> str:
    """One plain path component for the user text `text` (a grid run name, a sweep cell's model or corpus).

    `text` itself when it is plain (letters, digits, `._+-`, not starting with `.`, at most 64 characters);
    otherwise its plain characters (every run of others as `-`, at most 40) then `-` and the first 10 hex digits of
    sha256(text), so two distinct texts never share a name (a plain text ending in such a digest aside, 2^-40).
    Never empty, `.`, `..`, hidden, nor holding a path separator.
    """
    if _PLAIN.fullmatch(text):
        return text
    readable = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip(".-")[:40].rstrip(".")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{readable}-{digest}" if readable else digest


def child(parent: str | Path, name: str) -> Path:
    """`parent / name` for a name built from user input, checked to be one component directly inside `parent`."""
    path = Path(parent) / name
    if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name or path.parent != Path(parent):
        raise SinkscopeError(f"{name!r} is not a plain folder name inside {parent}")  # a bug, not user input
    return path


def real_target(path: str | Path, what: str = "--out") -> Path:
    """`path`, or where it points when it is a symbolic link to a directory (results are written there and the
    link stays); a link to anything else, or to nothing, is refused in one line."""
    path = Path(path)
    if not path.is_symlink():
        return path
    target = path.resolve()
    if not target.is_dir():
        raise SinkscopeError(
            f"{what} {path} is a symbolic link to {target}, which is not a directory; point it at a directory or "
            f"choose another {what}"
        )
    return target


def nested_results(directory: Path) -> list[Path]:
    """Sinkscope results stored inside the result `directory` (which `--overwrite` would delete with it)."""
    return sorted({p.parent for name in MARKERS for p in Path(directory).rglob(name) if p.parent != Path(directory)})


def is_result_directory(directory: Path) -> bool:
    """Whether `directory` was written by sinkscope (so `--overwrite` may replace it)."""
    return any((Path(directory) / name).is_file() for name in MARKERS)


def check_replaceable(directory: str | Path, overwrite: bool) -> None:
    """Refuse an existing non-empty `directory` unless `overwrite`, and refuse `overwrite` of anything that is
    not a sinkscope result (an empty directory is always fine)."""
    directory = real_target(directory)
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
        nested = nested_results(directory)
        if nested:
            raise SinkscopeError(
                f"--out {directory} holds other sinkscope results ({', '.join(map(str, nested[:3]))}), so --overwrite "
                "will not delete it; move them out first or choose another --out"
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
    directory = real_target(directory)
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
def staged_directory(
    directory: str | Path, replaceable: Callable[[Path], None] = lambda d: check_replaceable(d, overwrite=True)
) -> Iterator[Path]:
    """Yield an empty staging directory beside `directory`.

    When the block finishes, the staging directory replaces `directory`; when it
    raises, it is removed, so a crash or Ctrl-C never leaves a half-written result behind. An existing non-empty
    `directory` is replaced only if `replaceable(directory)` does not raise (default: it is one sinkscope result).
    """
    directory = real_target(directory)
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(directory)
        staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.partial-{os.getpid()}-"))
    except OSError as err:
        raise SinkscopeError(f"cannot write {directory}: {err.strerror or err}") from None
    try:
        yield staging
        staging.chmod(0o755)  # mkdtemp makes it private
        if directory.exists():
            replaceable(directory)
            # the old result moves aside first and goes only once the new one is in place
            old = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.partial-{os.getpid()}-old-"))
            directory.rename(old / directory.name)
            try:
                staging.rename(directory)
            except BaseException:
                (old / directory.name).rename(directory)
                shutil.rmtree(old, ignore_errors=True)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(directory)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise SinkscopeError(
            f"cannot write {directory}: {err.strerror or err}{_where(err)}; nothing was changed there, free space "
            "or choose another place and rerun"
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _where(err: OSError) -> str:
    return f" (writing {Path(err.filename).name})" if err.filename else ""


def check_file_target(path: str | Path) -> None:
    """Refuse a file `--out` that names a directory or lies in a folder that does not exist."""
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    if path.is_dir():
        raise SinkscopeError(f"--out {path} is a directory; name a file, e.g. {path / 'report.html'}")
    if not path.parent.is_dir():
        raise SinkscopeError(f"--out {path}: folder {path.parent} does not exist; create it or choose another --out")
    ours = path.name == "report.html" and is_result_directory(path.parent)  # a run's own page, of any version
    if path.exists() and not (is_page(path) or ours or path.stat().st_size == 0):
        raise SinkscopeError(
            f"--out {path} exists and is not a page sinkscope wrote, so it will not be replaced; choose another "
            "--out or delete it yourself"
        )


def is_page(path: Path) -> bool:
    """Whether the file `path` is a page of sinkscope's page builder (its generator marker near the top)."""
    try:
        with open(path, "rb") as handle:
            return PAGE_MARKER in handle.read(4096)
    except OSError:
        return False


@contextmanager
def staged_file(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling `.NAME.tmp-PID` to write; it replaces `path` when the block finishes and is
    removed when it raises. `path` naming a directory, lying in a missing folder or being a non-empty file that is
    not a sinkscope page (nor a result directory's report.html) is refused first; a symbolic link is followed (the page goes where it points)."""
    path = Path(path)
    check_file_target(path)
    if path.is_symlink():
        path = path.resolve()
    clean_stale(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise SinkscopeError(
            f"cannot write {path}: {err.strerror or err}; the previous file (if any) is unchanged; free space or "
            "choose another --out"
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def staged_file_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` whole or not at all (a temporary sibling `.NAME.tmp-PID`, renamed over `path`), for
    files inside a result directory sinkscope owns; a full disk leaves the previous file and is one line."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise SinkscopeError(f"cannot write {path}: {err.strerror or err}; the previous file (if any) is unchanged; "
                             "free space and rerun") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
