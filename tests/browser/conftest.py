"""A real headless Chromium (Debian's `/usr/bin/chromium`) driven by Playwright's Python API.

`open_page(path)` loads a sinkscope HTML file from `file://` and records every console error, page error and
network request, so a test can assert that a self-contained page loaded cleanly.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling Google's hosts, which this network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


@dataclass
class LoadedPage:
    """A page opened from disk with everything it did while loading."""

    page: object  # playwright.sync_api.Page
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every non-file:// and non-data: URL requested

    def assert_clean(self) -> None:
        assert not self.console_errors, self.console_errors
        assert not self.page_errors, self.page_errors
        assert not self.requests, f"network requests from a self-contained page: {self.requests}"

    def assert_images_render(self) -> None:
        """Every <img> decoded to a non-empty bitmap."""
        broken = self.page.evaluate(
            "() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.alt || i.src.slice(0, 60))"
        )
        assert not broken, f"images that did not render: {broken}"


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: run 'apt-get install -y chromium' (make test does this)")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser) -> Iterator[Callable[..., LoadedPage]]:
    """`open_page(path, viewport=(1280, 900))` → LoadedPage, with the page fully loaded."""
    contexts = []

    def _open(path: str | Path, viewport: tuple[int, int] = (1280, 900)) -> LoadedPage:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(context)
        page = context.new_page()
        loaded = LoadedPage(page)
        page.on("console", lambda m: loaded.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: loaded.page_errors.append(str(e)))
        page.on(
            "request",
            lambda r: loaded.requests.append(r.url) if not r.url.startswith(("file:", "data:", "blob:")) else None,
        )
        page.goto(Path(path).resolve().as_uri(), wait_until="load")
        return loaded

    yield _open
    for context in contexts:
        context.close()
