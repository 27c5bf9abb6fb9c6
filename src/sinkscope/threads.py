"""How many CPU threads torch should use: the CPUs this process may run on, less the load they already carry.

torch starts one thread per core. On a shared machine those threads oversubscribe the cores: every parallel step
waits for its slowest thread, and a pass can run ten times slower than on one thread (docs/performance.md,
Threads). `choose_threads` picks, without importing torch:

    cpus  = |sched_getaffinity(0)|, capped by a cgroup CPU quota (cpu.max) where there is one
    load  = the 1-minute load average × cpus / os.cpu_count()   (the share of the machine's load on our CPUs)
    auto  = clamp(round(cpus − load), 1, cpus)

so a quiet 2-core machine gets 2 threads and one with a busy process per core gets 1; under torchrun the ranks of
one machine (`LOCAL_WORLD_SIZE`) share it: `auto // ranks`, at least 1. `OMP_NUM_THREADS`, when set, wins over the
estimate (torch reads it too).

The CLI chooses once per process and `pin`s the choice; the Python API (`sinkscope.analyze(..., threads="auto")`)
chooses the same way for each call through `threads_for_call`, unless the CLI pinned a choice or the caller passes
`threads=N` (that count) or `threads=None` (torch's count left as the caller set it), and gives torch's previous
count back when the call ends.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "QUOTA PERIOD" in µs, or "max PERIOD" for no quota


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count and the words that say where it came from (printed first by analyze, kept in run.json)."""

    threads: int
    reason: str

    def line(self) -> str:
        """'1 CPU thread (auto: ...)', as analyze's first line says it."""
        return f"{self.threads} CPU thread{'s' if self.threads != 1 else ''} ({self.reason})"


def usable_cpus(cpu_max: Path | None = None) -> int:
    """The CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota (`cpu_max`, default
    `CPU_MAX`: containers)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = (CPU_MAX if cpu_max is None else cpu_max).read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota visible: the affinity mask alone
    return max(1, cpus)


def load_share(cpus: int) -> float:
    """The 1-minute load average × cpus / os.cpu_count(): the part of the machine's load on this process's CPUs."""
    if not hasattr(os, "getloadavg"):
        return 0.0
    return os.getloadavg()[0] * cpus / (os.cpu_count() or cpus)


def slowdown() -> float:
    """How much longer a one-thread step takes now than on a quiet machine: `max(1, (load + 1) / cpus)`, one CPU's
    share when `load` other runnable threads and this one share `cpus` CPUs evenly."""
    cpus = usable_cpus()
    return max(1.0, (load_share(cpus) + 1) / cpus)


def auto_threads(cpus: int, load: float) -> int:
    """`clamp(round(cpus − load), 1, cpus)`: one thread per CPU that the load leaves free (halves round up)."""
    return max(1, min(cpus, math.floor(cpus - load + 0.5)))


def choose_threads(requested: int | str | None = None, omp: str | None = None) -> ThreadChoice:
    """`requested` threads (an int: `--threads N`), or with None / "auto" the module doc's estimate; `omp` is
    `OMP_NUM_THREADS` (read from the environment when None), which an automatic choice follows when it is set."""
    if isinstance(requested, int):
        return ThreadChoice(requested, f"--threads {requested}")
    omp = os.environ.get("OMP_NUM_THREADS", "") if omp is None else omp
    if omp.strip().isdigit() and int(omp) >= 1:
        return ThreadChoice(int(omp), f"OMP_NUM_THREADS={int(omp)}; --threads N to choose")
    cpus = usable_cpus()
    load = load_share(cpus)
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")  # torchrun's processes on this machine
    ranks = int(local) if local.isdigit() and int(local) >= 1 else 1
    shared = f", shared by {ranks} torchrun ranks" if ranks > 1 else ""
    return ThreadChoice(
        max(1, auto_threads(cpus, load) // ranks),
        f"auto: this process may use {cpus} CPU{'s' if cpus != 1 else ''}, which carry a load of {load:.1f}"
        f"{shared}; --threads N to choose",
    )


_pinned: ThreadChoice | None = None  # the CLI's choice for the whole process (`pin`)


def pin(choice: ThreadChoice | None) -> None:
    """Record the thread choice a command applied for the whole process, so that the API calls it makes keep it
    (None: forget it)."""
    global _pinned
    _pinned = choice


@contextmanager
def threads_for_call(requested: int | str | None = "auto") -> Iterator[ThreadChoice]:
    """torch's CPU thread count for one API call: `requested` threads (an int), or with "auto" the CLI's pinned
    choice where a command made one, else `choose_threads()` (the module doc's estimate from the load), or with None
    the count torch has now (the caller set it). The count torch had before is restored when the call ends; the
    choice yielded is what the result's provenance records (`timings.threads`, `timings.threads_chosen`)."""
    import torch

    if requested is None:
        yield ThreadChoice(torch.get_num_threads(), "threads=None: torch's count as the caller left it")
        return
    if isinstance(requested, bool) or not (requested == "auto" or isinstance(requested, int)) or (
        isinstance(requested, int) and requested < 1
    ):
        from sinkscope.errors import SinkscopeError

        raise SinkscopeError(f"threads={requested!r} must be 'auto', None or a whole number of 1 or more")
    if isinstance(requested, int):
        choice = ThreadChoice(requested, f"threads={requested}")
    else:
        choice = _pinned if _pinned is not None else choose_threads()
    before = torch.get_num_threads()
    torch.set_num_threads(choice.threads)
    try:
        yield choice
    finally:
        torch.set_num_threads(before)


BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # numpy's and scipy's BLAS read them when first loaded


def limit_blas_threads(threads: int) -> None:
    """Give numpy's BLAS (the geometry step's solvers) the same thread count as torch, where the user set none.
    Effective only before numpy is first imported, which the CLI does not do before a command runs; torch's own
    count is `torch.set_num_threads`."""
    for name in BLAS_VARIABLES:
        os.environ.setdefault(name, str(threads))


def parse_threads(text: str) -> int | str:
    """`--threads` value: "auto" or a whole number (argparse type; `apply_threads` refuses one below 1)."""
    import argparse

    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither 'auto' nor a whole number") from None
    return value


@contextmanager
def one_blas_thread_in_children() -> Iterator[None]:
    """While open, processes this one starts get one BLAS thread each (`BLAS_VARIABLES` = 1 in the environment
    they inherit; this process's BLAS, loaded already, keeps its count): a pool of as many processes as free
    cores, each with as many BLAS threads as cores, would spin threads against each other. The variables are
    restored when it closes."""
    before = {name: os.environ.get(name) for name in BLAS_VARIABLES}
    os.environ.update(dict.fromkeys(BLAS_VARIABLES, "1"))
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
