"""Shared test setup: offline hub, fixed seeds, and tiny random-weight Hugging Face models built from configs."""

import os
import socket
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import Phase, settings  # noqa: E402

# `make test` runs two pytest-xdist workers on a two-core machine: each worker's torch gets one thread, so the two
# together use the two cores instead of four threads oversubscribing them (every parallel step of torch waits for its
# slowest thread; docs/performance.md, Threads). A test that needs another count sets it and gives the old one back.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

# Hypothesis's explain phase traces every line of every example (sys.settrace) to explain a failure it may never
# see: the name property test ran 270 s traced. A failure is still shrunk and reported; only the explanation goes.
# Derandomized: CI draws the same examples every run, so a red CI names a bug, not an unlucky seed. No deadline:
# Hypothesis's default fails an example that takes over 200 ms of wall clock, which a loaded machine reaches.
settings.register_profile(
    "sinkscope", phases=[phase for phase in Phase if phase != Phase.explain], derandomize=True, deadline=None
)
settings.load_profile("sinkscope")

# The tiers, slowest first (`make test` schedules whole files on two workers, in this order: --dist loadfile
# --no-loadscope-reorder). The real-model and packaging files, a few minutes each under load, then start at once and
# the many short unit files fill in behind them, instead of one long file running alone at the end.
TIERS = ("slow", "packaging", "browser", "integration", "unit")
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the collected tests by tier (`TIERS`), keeping the order inside each tier."""

    def tier(item: pytest.Item) -> int:
        folder = Path(item.fspath).relative_to(HERE).parts[0]
        return TIERS.index(folder) if folder in TIERS else len(TIERS)

    items.sort(key=tier)


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that no process holds now, chosen by the OS, for a test's process group: a fixed port
    is taken when the same test runs at once in another pytest worker, checkout or mutation run on this machine."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
