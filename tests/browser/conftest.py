"""A real headless Chromium (Debian's `/usr/bin/chromium`) driven by Playwright's Python API.

`open_page(path)` loads a sinkscope HTML file from `file://` and records every console error, page error and
network request, so a test can assert that a self-contained page loaded cleanly.

Where Chromium or Playwright is missing (`make test` could not install Chromium: no root, or apt failed), every
browser test is skipped before its fixtures run, with the reason, and the session ends with one line naming how
many browser tests were skipped and why; every other test still runs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from integration.tiny_checkpoint import save_tiny_llama, write_corpus
from integration.waiting import PAGE_GUARD_MS
from sinkscope.cli.main import main

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling Google's hosts, which this network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not Path(CHROMIUM).exists():
        return f"Chromium is missing ({CHROMIUM}): 'sudo apt-get install -y chromium' (make test does this as root)"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is missing: pip install -e '.[dev]' (make test does this)"
    return None


def pytest_collection_modifyitems(config, items) -> None:
    """Skip this folder's tests, with the reason, where the browser cannot run (before any fixture is built)."""
    reason = missing_browser()
    here = Path(__file__).parent
    if reason is not None:
        for item in items:
            if here in Path(item.fspath).parents:
                item.add_marker(pytest.mark.skip(reason=f"browser test skipped: {reason}"))


def pytest_terminal_summary(terminalreporter) -> None:
    """One line at the end of the session: how many browser tests were skipped, and why."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        if "browser test skipped: " in reason:
            reason = reason.split("browser test skipped: ", 1)[1]
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in reasons.items():
        terminalreporter.write_line(f"sinkscope: {count} browser tests skipped: {reason}", yellow=True, bold=True)


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
    from playwright import sync_api

    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser) -> Iterator[Callable[..., LoadedPage]]:
    """`open_page(path, viewport=(1280, 900), query="")` → LoadedPage, with the page (and `?query`) fully loaded."""
    contexts = []

    def _open(path: str | Path, viewport: tuple[int, int] = (1280, 900), query: str = "") -> LoadedPage:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        context.set_default_timeout(PAGE_GUARD_MS)  # every wait is on the page's own signal; this guard ends a hang
        contexts.append(context)
        page = context.new_page()
        loaded = LoadedPage(page)
        page.on("console", lambda m: loaded.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: loaded.page_errors.append(str(e)))
        page.on(
            "request",
            lambda r: loaded.requests.append(r.url) if not r.url.startswith(("file:", "data:", "blob:")) else None,
        )
        page.goto(Path(path).resolve().as_uri() + (f"?{query}" if query else ""), wait_until="load")
        return loaded

    yield _open
    for context in contexts:
        context.close()


def save_deeper_llama(directory, template):
    """The tiny Llama's tokenizer with a 3-layer random model (another depth for the relative-depth axis)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig.from_pretrained(template)
    config.num_hidden_layers = 3
    LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    AutoTokenizer.from_pretrained(template).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """Three analyze runs (a tiny 2-layer Llama on 6 windows of a text corpus and on 4 of random tokens, a 3-layer
    one on the same 6 windows of the text) and their comparison page `cmp.html`; shared by test_pages.py and
    test_compare_intervals.py."""
    root = tmp_path_factory.mktemp("pages")
    model, corpus = save_tiny_llama(root / "model"), write_corpus(root / "corpus.txt", documents=60)
    deep = save_deeper_llama(root / "deep_model", model)
    for name, where, source, extra in (("prose_run", model, str(corpus), ["--smoothing"]),
                                       ("random_run", model, "builtin:random", ["--threads", "1", "--max-windows", "4"]),
                                       ("deep_run", deep, str(corpus), [])):  # fmt: skip
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["analyze", "--model", str(where), "--corpus", source, "--seq-len", "16", "--max-windows",
                         "6", "--geometry-cap", "24", "--out", str(root / name), "--quiet", *extra])  # fmt: skip
        assert code == 0
        (root / name / "printed.txt").write_text(printed.getvalue())
    names = [str(root / name) for name in ("prose_run", "random_run", "deep_run")]
    assert main(["report", *names, "--out", str(root / "cmp.html")]) == 0
    return root
