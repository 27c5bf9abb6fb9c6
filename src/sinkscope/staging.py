"""Result directories and files appear whole or not at all, and nothing of the user's is ever lost
(docs/reliability.md).

* `claimed_output(out, overwrite)`: at the start of a command, take the lock beside `out` (`locking.held`: one
  writer per result, the lock names its host), refuse an `out` inside a folder another sinkscope process is writing,
  recover what killed writers left (only now, under the lock), refuse to replace anything sinkscope cannot prove it
  wrote, and create `out` (so an unwritable place fails before any work).
* `staged_directory(out)` / `staged_file(path)`: write in a hidden sibling (`.NAME.partial-PID@TAG-*`,
  `.NAME.tmp-PID@TAG`), stamp a directory with its ownership marker (`ownership.py`), then rename into place; on an
  exception the sibling is removed. A result that finds its place taken by files it may not replace is kept beside
  it (`NAME.unsaved-TIME`), never dropped.
* A result is replaced only when the user asked (`--overwrite`) and its marker lists everything inside it: never a
  folder of other files, never results nested inside it, never a file that is not a sinkscope page.
* `--out` a symbolic link to a directory writes where the link points; the link itself stays. `--out .` is the
  current folder by its absolute path; an empty `--out` is one line.
* `safe_name(text)`: a folder name for user text (grid run names, sweep cells) that is one plain path component,
  so it stays inside `--out`, and distinct texts give distinct names.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sinkscope.errors import SinkscopeError
from sinkscope.locking import (
    CREATED,
    busy,
    describe,
    held,
    host_tag,
    lock_file,
    recover,
    temporary_file,
    temporary_prefix,
)
from sinkscope.ownership import foreign_entries, is_page, kind_of, read_marker, write_marker

_PLAIN = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,63}")


def output_path(text: str | Path, what: str = "--out") -> Path:
    """The folder `text` names, refused in one line when empty; `.`, `..` and `a/..` become absolute (they have no
    name of their own for the lock and the staging siblings)."""
    if not str(text).strip():
        raise SinkscopeError(f"{what} is empty; name a folder, e.g. {what} runs/mine")
    path = Path(text)
    if path.name in ("", ".", ".."):
        path = Path(os.path.abspath(path))
    if path.name == "":
        raise SinkscopeError(f"{what} {text} is the root folder; name a folder inside it, e.g. {what} /tmp/run")
    _check_name_fits(path, what)
    return path


def _name_limit(path: Path) -> int:
    """The longest file name the file system under `path` takes (its nearest existing folder's NAME_MAX)."""
    folder = Path(os.path.abspath(path)).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _check_name_fits(path: Path, what: str) -> None:
    """Refuse, before any work, a name too long for the file system once sinkscope's siblings of it are named: the
    lock `.NAME.lock`, the staging names `.NAME.partial-PID@TAG-old-XXXXXXXX` and `.NAME.tmp-PID@TAG`, and
    `NAME.unsaved-TIME-PID` (where a finished result is kept when its place was taken)."""
    name = Path(os.path.abspath(path)).name
    siblings = (lock_file(path).name, temporary_prefix(path, old=True) + "X" * 8,
                f".{name}.tmp-{os.getpid()}@{host_tag()}", f"{name}.unsaved-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    longest, limit = max(len(n.encode("utf-8", "surrogatepass")) for n in siblings), _name_limit(path)
    if longest > limit:
        over = longest - limit
        raise SinkscopeError(
            f"{what} {path}: the name {name[:40]}... is {len(name.encode('utf-8', 'surrogatepass'))} bytes long, and the "
            f"names sinkscope writes beside it while saving need {over} byte(s) more than the {limit} this file system "
            f"allows; choose a name at least {over} byte(s) shorter"
        )


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


def is_result_directory(directory: Path) -> bool:
    """Whether `directory` holds one whole result sinkscope wrote and nothing else (so `--overwrite` may replace it)."""
    return foreign_entries(directory) == []


def check_replaceable(directory: str | Path, overwrite: bool) -> None:
    """Refuse an existing non-empty `directory` unless `overwrite`, and refuse `overwrite` of anything sinkscope
    cannot prove it wrote (`ownership.foreign_entries`); an empty directory is always fine."""
    directory = real_target(directory)
    if directory.exists() and not directory.is_dir():
        raise SinkscopeError(f"--out {directory} exists and is not a directory; choose another --out")
    if directory.is_dir() and any(directory.iterdir()):
        if not overwrite:
            raise SinkscopeError(f"--out {directory} already exists; choose another directory or pass --overwrite")
        foreign = foreign_entries(directory)
        if foreign is None:
            raise SinkscopeError(
                f"--out {directory} is not a sinkscope result (it has no sinkscope marker: written by hand, by another "
                "program or by a sinkscope older than this rule), so --overwrite will not delete it; choose another "
                "--out or delete it yourself"
            )
        if foreign:
            raise SinkscopeError(
                f"--out {directory} holds files sinkscope did not write ({', '.join(foreign[:3])}"
                f"{', ...' if len(foreign) > 3 else ''}), so --overwrite will not delete it; move them out or choose "
                "another --out"
            )


def _check_not_inside_busy(directory: Path) -> None:
    """Refuse an `out` inside a folder another sinkscope process is writing (its save would find it taken)."""
    for parent in Path(os.path.abspath(directory)).parents:
        if parent.name and (holder := busy(parent)) is not None:
            raise SinkscopeError(
                f"--out {directory} lies inside {parent}, which another sinkscope process ({describe(holder)}) is "
                "writing; choose an --out outside it"
            )


@contextmanager
def claimed_output(directory: str | Path, overwrite: bool = False, resume: bool = False) -> Iterator[Path]:
    """Take the lock of result directory `directory`, recover what killed writers left there, and create it.

    Raises a `SinkscopeError` before any work when the directory cannot be created or written, exists and may not
    be replaced, lies inside a folder another process writes, or another process holds its lock. If the block
    raises and the directory was created here and is still empty, it is removed again. `resume=True` (a grid or
    sweep filled run by run, whose caller checked what the folder holds) skips the replace check.
    """
    directory = real_target(output_path(directory))
    if not resume:
        check_replaceable(directory, overwrite)  # before the lock: a refused command creates nothing
    _check_not_inside_busy(directory)
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SinkscopeError(f"cannot write --out {directory}: {err.strerror or err}; choose a directory you can write") from None
    with held(directory):
        recover(directory)  # only now: the lock proves no live writer of this host is mid-save
        if not resume:
            check_replaceable(directory, overwrite)  # a recovered result is checked like any other
        created = not directory.exists()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-")  # can we write inside?
            probe.close()
        except OSError as err:
            if created and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
            raise SinkscopeError(
                f"cannot write --out {directory}: {err.strerror or err}; choose a directory you can write"
            ) from None
        try:
            yield directory
        except BaseException:
            if created and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
            raise


@contextmanager
def claimed_workspace(directory: str | Path, kind: str) -> Iterator[Path]:
    """`claimed_output` for a folder a command fills section by section and reuses on a rerun (`reproduce`): it must
    be new, empty, or stamped as `kind` by an earlier run of that command; anything else is refused in one line.
    Its sections are replaced only when their own markers prove sinkscope wrote them (`staged_directory`)."""
    directory = real_target(output_path(directory))

    def check() -> None:
        if directory.exists() and not directory.is_dir():
            raise SinkscopeError(f"--out {directory} exists and is not a directory; choose another --out")
        if directory.is_dir() and any(directory.iterdir()) and kind_of(directory) != kind:
            raise SinkscopeError(
                f"--out {directory} holds files that are not the output of an earlier sinkscope {kind}, so {kind} "
                "will not write into it (it replaces its own sections, tables and pages there); choose another --out"
            )

    check()
    with claimed_output(directory, resume=True):
        check()
        if kind_of(directory) is None:
            write_marker(directory, kind)
        yield directory


@contextmanager
def staged_directory(
    directory: str | Path,
    replaceable: Callable[[Path], None] = lambda d: check_replaceable(d, overwrite=True),
    kind: str = "result",
) -> Iterator[Path]:
    """Yield an empty staging directory beside `directory`.

    When the block finishes, the staging directory is stamped with the ownership marker of `kind` and replaces
    `directory`; when it raises, it is removed, so a crash or Ctrl-C never leaves a half-written result behind. An
    existing non-empty `directory` is replaced only if `replaceable(directory)` does not raise (default: it is one
    whole sinkscope result); when it raises, the new result is kept as `NAME.unsaved-TIME` beside it.
    """
    directory = real_target(output_path(directory, "folder"))
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SinkscopeError(f"cannot write {directory}: {err.strerror or err}") from None
    with held(directory, reentrant=True):
        recover(directory)
        try:
            staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=temporary_prefix(directory)))
        except OSError as err:
            raise SinkscopeError(f"cannot write {directory}: {err.strerror or err}") from None
        CREATED.add(str(staging))
        try:
            yield staging
            staging.chmod(0o755)  # mkdtemp makes it private
            write_marker(staging, kind)
            if directory.exists():
                _check_or_keep(directory, staging, replaceable)
                # the old result moves aside first and goes only once the new one is in place
                old = Path(tempfile.mkdtemp(dir=directory.parent, prefix=temporary_prefix(directory, old=True)))
                CREATED.add(str(old))
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


def _check_or_keep(directory: Path, staging: Path, replaceable: Callable[[Path], None]) -> None:
    """`replaceable(directory)`, and when it refuses, the finished result in `staging` is kept under a visible name."""
    try:
        replaceable(directory)
    except SinkscopeError as err:
        kept = directory.with_name(f"{directory.name}.unsaved-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        staging.rename(kept)
        raise SinkscopeError(f"{err}; the finished result is kept in {kept}") from None


def _where(err: OSError) -> str:
    return f" (writing {Path(err.filename).name})" if err.filename else ""


def check_file_target(path: str | Path) -> None:
    """Refuse a file `--out` that names a directory or lies in a folder that does not exist, and an existing file
    sinkscope did not write (neither a sinkscope page nor a file its result directory's marker lists)."""
    path = output_path(path)
    if path.is_symlink():
        path = path.resolve()
    if path.is_dir():
        raise SinkscopeError(f"--out {path} is a directory; name a file, e.g. {path / 'report.html'}")
    if not path.parent.is_dir():
        raise SinkscopeError(f"--out {path}: folder {path.parent} does not exist; create it or choose another --out")
    marker = read_marker(path.parent)
    # a run's own page, of any version; a result's other files (run.json, tables) are never a page to replace
    ours = marker is not None and path.name == "report.html" and path.name in marker["entries"]
    if path.exists() and not (is_page(path) or ours or path.stat().st_size == 0):
        raise SinkscopeError(
            f"--out {path} exists and is not a page sinkscope wrote, so it will not be replaced; choose another "
            "--out or delete it yourself"
        )


@contextmanager
def staged_file(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling `.NAME.tmp-PID@TAG` to write; it replaces `path` when the block finishes and is
    removed when it raises. `path` naming a directory, lying in a missing folder or being a non-empty file that is
    not a sinkscope page (nor a file its result directory's marker lists) is refused first; a symbolic link is
    followed (the page goes where it points)."""
    path = output_path(path)
    check_file_target(path)
    if path.is_symlink():
        path = path.resolve()
    with held(path, reentrant=True):
        recover(path)
        tmp = temporary_file(path)
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
    """Write `data` to `path` whole or not at all (a temporary sibling `.NAME.tmp-PID@TAG`, renamed over `path`), for
    files inside a result directory sinkscope owns; a full disk leaves the previous file and is one line."""
    path = Path(path)
    tmp = temporary_file(path)
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
