"""Issue 32, item 9: user text never reaches a parser. Property test (hypothesis) over names built from `$`, `\\`,
`{}`, mathtext, HTML markup and plain text, given as a model folder, a corpus file and a run folder, through the
real `analyze` (figures and page drawn), `report` (a comparison page), `sweep` and `view`: the run is saved and
every page is whole HTML that shows the name as text (no markup from it, the name escaped).

Two examples (each draws every figure of a run on a tiny random Llama): the issue's names, and one drawn at random.
"""

from __future__ import annotations

import html
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sinkscope.cli.main import main

from .tiny_checkpoint import save_tiny_llama, write_corpus

PARTS = ["$", "$5$", "price_$5_$", "a$b$c", "\\", "\\frac{a}{b}", "{}", "{x}", "$x^2$", "_", "^", "%", "&amp;",
         "<b>bold", "<script>", "<img src=x onerror=alert(1)>", '"', "'", "#", "~", " ", "é", "名"]  # fmt: skip
NAMES = st.lists(st.sampled_from(PARTS) | st.text("abc$\\{}_^<>&", min_size=1, max_size=4), min_size=1,
                 max_size=4).map("".join).filter(lambda n: n.strip() not in ("", ".", "..") and not n.startswith("."))  # fmt: skip


class Tags(HTMLParser):
    """The start tags of a page and whether its html element closes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.closed = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self.closed |= tag == "html"


def opens(page: Path, name: str) -> None:
    """`page` is a whole page, holds no element or handler that came from `name`, and shows `name` as text."""
    text = page.read_text(encoding="utf-8")
    parser = Tags()
    parser.feed(text)
    assert parser.closed, f"{page} is not whole"
    assert not any(tag == "b" and "bold" in text for tag, _ in parser.tags if "<b>bold" in name)
    assert not any("onerror" in attrs for _, attrs in parser.tags), f"{page}: markup from the name became a tag"
    assert html.escape(name, quote=False) in text or html.escape(name) in text or json.dumps(name)[1:-1] in text


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    return save_tiny_llama(root / "model"), write_corpus(root / "corpus.txt", documents=20, words=20)


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES)
@example(name="price_$5_$ a$b$c \\frac{1}{2} <b>bold")  # the names, in one
def test_any_name_is_saved_and_every_page_opens(tiny, tmp_path_factory, name):
    model, corpus = tiny
    root = tmp_path_factory.mktemp("n")
    named_model, named_corpus, out = root / name, root / f"{name}.txt", root / f"run {name}"
    shutil.copytree(model, named_model)
    shutil.copy(corpus, named_corpus)
    common = ["--seq-len", "8", "--max-windows", "2", "--batch-size", "2", "--quiet"]
    assert main(["analyze", "--model", str(named_model), "--corpus", str(named_corpus), "--geometry-cap", "0",
                 *common, "--out", str(out)]) == 0  # fmt: skip
    meta = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert meta["model"]["name"] == name and meta["corpus"]["source"] == str(named_corpus)
    assert sorted(p.suffix for p in (out / "figures").iterdir()) and (out / "report.html").is_file()
    opens(out / "report.html", name)
    comparison = root / "compare.html"
    assert main(["report", str(out), str(out), "--out", str(comparison)]) == 0
    opens(comparison, name)
    sweep = root / "sweep"
    assert main(["sweep", "--models", str(named_model), "--corpora", str(named_corpus), "--seq-lens", "8",
                 "--epsilons", "0.3", "--max-windows", "2", "--batch-size", "2", "--quiet", "--out", str(sweep)]) == 0  # fmt: skip
    opens(sweep / "report.html", name)
    page = root / "view.html"
    assert main(["view", "--model", str(named_model), "--text", f"a b {name}", "--out", str(page)]) == 0
    opens(page, name)
