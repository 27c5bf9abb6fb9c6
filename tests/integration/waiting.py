"""Waiting in tests that drive real processes or a real browser: on a file a child writes, on its exit or on an
element a page sets when it is ready, never on a guess of how long the work takes. A guard only ends a test that would
otherwise hang forever (a bug); each is far above what any of these steps takes on two cores under a load of 10, so a
slow machine never reaches it, and `SINKSCOPE_TEST_TIMEOUT_SCALE` (default 1) multiplies every guard for a machine
slower still.

The few tests that check a speed the issue promises (a cached model load, `reproduce --quick`, a page's time to
ready) measure what the load does not change: the CPU seconds of the work (`cpu_seconds`), or, for the browser's
own clock, a bound scaled by the machine's load (`load_slowdown`)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCALE = float(os.environ.get("SINKSCOPE_TEST_TIMEOUT_SCALE", "1"))
HANG_GUARD = 600.0 * SCALE  # seconds: a child process's step, a build, an install
# milliseconds: Playwright's waits for a page's ready element (a page is ready in about 2 s on two quiet cores)
PAGE_GUARD_MS = 120_000 * SCALE

# A line for a child's script: block until a signal ends the process (SIGINT's or sinkscope's SIGTERM handler raises
# KeyboardInterrupt out of the sleep; SIGKILL just ends it). A sleep of fixed length could run out on a slow machine
# before the test sends its signal, and the child would then finish normally.
BLOCK_UNTIL_SIGNALLED = "while True: time.sleep(60)"

# The first line of a child's script that a test interrupts: Ctrl-C as a terminal's foreground job gets it (Python's
# KeyboardInterrupt handler, SIGINT and SIGTERM not blocked). A process started in the background of a shell without
# job control (`make test &` or `nohup` in a script) inherits SIGINT ignored, as POSIX prescribes, and Python then
# leaves it ignored: the child would sleep through the test's SIGINT until the hang guard (a CI run launched that way).
AS_A_FOREGROUND_JOB = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                       "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})")


@contextmanager
def launched_in_the_background() -> Iterator[None]:
    """SIGINT ignored in this process for the block, as a shell without job control leaves a job it starts with `&`:
    the children started inside inherit it, whatever way this test run itself was started."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` runs a handler for `signum` that its main thread does not block (`/proc/PID/status`:
    bit `signum - 1` set in SigCgt, clear in SigIgn and SigBlk), so the signal reaches the handler now."""
    status = (line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    masks = dict(status)
    caught, ignored, blocked = (int(masks[key], 16) >> (signum - 1) & 1 for key in ("SigCgt", "SigIgn", "SigBlk"))
    return bool(caught and not ignored and not blocked)


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process's threads and by its children that have ended: the
    work done, which other processes on the machine do not lengthen (wall-clock time under a load of 10 is 5 times
    longer). Take a difference around the work."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def load_slowdown() -> float:
    """`max(1, (load + 1) / cpus)` with the 1-minute load average: how much longer one thread's step takes now than
    on a quiet machine, when it shares the CPUs evenly with `load` other runnable threads."""
    return max(1.0, (os.getloadavg()[0] + 1) / len(os.sched_getaffinity(0)))


def wait_for(path: Path, process: subprocess.Popen, seconds: float = HANG_GUARD) -> None:
    """Return once `path` exists; fail if `process` ended first (with its stderr) or after the hang guard."""
    deadline = time.monotonic() + seconds
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), process.communicate()[1] if process.poll() is not None else f"{path} not written yet"
