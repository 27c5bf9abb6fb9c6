"""The documentation site, built as `mkdocs build --strict` builds it and opened from disk (`file://`), the way a
reader without a web server opens it: every page loads without a console error, a page error or a network request,
and search answers from disk (docs/hooks/offline_search.py), both from search.html?q= and from the sidebar's box.

The build takes about 10 s on 2 busy cores; the site is built once for the module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from integration.waiting import HANG_GUARD

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is a dev extra: pip install -e '.[dev]'")
    site = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_GUARD)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return site


def test_every_page_opens_from_disk_without_an_error(site, open_page):
    # 404.html is a web server's answer to a missing page (its links are relative to the server's root), never opened
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    assert len(pages) > 15 and site / "search.html" in pages
    for page in pages:
        loaded = open_page(page)
        try:
            loaded.assert_clean()
        except AssertionError as error:
            raise AssertionError(f"{page.relative_to(site)}: {error}") from None


def results(loaded) -> list[tuple[str, str]]:
    """(title, href) of each search result once the page has searched."""
    loaded.page.wait_for_selector("#mkdocs-search-results article")
    return loaded.page.eval_on_selector_all("#mkdocs-search-results article a",
                                            "links => links.map(a => [a.textContent, a.href])")  # fmt: skip


def test_search_answers_from_disk(site, open_page):
    loaded = open_page(site / "search.html", query="q=oversmoothing")
    found = results(loaded)
    loaded.assert_clean()
    # independent of lunr: the pages whose text holds the word, read from the built files
    holding = {p.name for p in site.rglob("*.html") if "oversmoothing" in p.read_text().lower()}
    assert found and {Path(href.split("#")[0]).name for _, href in found} <= holding, (found, holding)
    assert any(href.split("#")[0].endswith("theory/oversmoothing.html") for _, href in found), found
    for _, href in found:  # every result opens a built page
        assert href.startswith("file://") and Path(href[len("file://"):].split("#")[0]).is_file(), href
    loaded.page.fill("#mkdocs-search-query", "zzzqqqnotaword")
    loaded.page.keyboard.press("Enter")
    loaded.page.wait_for_function("document.getElementById('mkdocs-search-results').textContent.includes('No results')")


def test_the_sidebar_search_box_leads_to_results(site, open_page):
    loaded = open_page(site / "statistics.html")
    loaded.page.fill("input[name=q]", "bootstrap")
    with loaded.page.expect_navigation():
        loaded.page.keyboard.press("Enter")
    assert loaded.page.url.split("?")[0].endswith("/search.html")
    assert results(loaded)
    loaded.assert_clean()
