"""The reproduction's own directories (section results, tables, figures) appear whole or not at all."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def swapped_directory(directory: Path) -> Iterator[Path]:
    """Yield an empty sibling to write; when the block finishes it replaces `directory` (which only
    `sinkscope reproduce` writes), when it raises it is removed and `directory` is left as it was."""
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
