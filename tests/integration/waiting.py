"""Waiting in tests that drive real processes: on a file a child writes or on its exit, never on a guess of how
long the work takes. `HANG_GUARD` only ends a test that would otherwise hang forever (a bug); it is far above what
any of these steps takes on two cores under a load of 10, so a slow machine never reaches it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

HANG_GUARD = 600.0  # seconds

# A line for a child's script: block until a signal ends the process (SIGINT's or sinkscope's SIGTERM handler raises
# KeyboardInterrupt out of the sleep; SIGKILL just ends it). A sleep of fixed length could run out on a slow machine
# before the test sends its signal, and the child would then finish normally.
BLOCK_UNTIL_SIGNALLED = "while True: time.sleep(60)"


def wait_for(path: Path, process: subprocess.Popen, seconds: float = HANG_GUARD) -> None:
    """Return once `path` exists; fail if `process` ended first (with its stderr) or after the hang guard."""
    deadline = time.monotonic() + seconds
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), process.communicate()[1] if process.poll() is not None else f"{path} not written yet"
