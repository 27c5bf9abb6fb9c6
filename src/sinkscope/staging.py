"""Result directories appear whole or not at all: written in a hidden sibling, then renamed into place."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged_directory(directory: str | Path) -> Iterator[Path]:
    """Yield an empty staging directory beside `directory`.

    When the block finishes, the staging directory replaces `directory` (readable like any directory); when it
    raises, it is removed, so a crash or Ctrl-C never leaves a half-written result behind.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.partial-"))
    try:
        yield staging
        staging.chmod(0o755)  # mkdtemp makes it private
        if directory.exists():
            shutil.rmtree(directory)
        staging.rename(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
