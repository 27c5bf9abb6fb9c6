"""Names are text everywhere. `report.md` of `reproduce`, rendered by an independent CommonMark renderer
(markdown-it-py, tables on, raw HTML passed through as a Markdown viewer does), shows hostile model and corpus names
as text: no tag from a name, no heading or table row forged by a newline, no cell split by a pipe. A saved figure
keeps mathtext for its numeric axes (a log axis's ticks are drawn as 10 with a superscript, never as the raw
`$\\mathdefault{10^{2}}$`) while a name with `$` in its stamp, title or tick labels is drawn literally: both read back
from the SVG's text elements (fonts written as text)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import matplotlib
import numpy as np
import pandas as pd
import pytest

from sinkscope.report.page import render_page
from sinkscope.report.plots import FIGURE_LABEL, bos_geometry, figure_svg, no_mathtext
from sinkscope.reproduction.claim_texts import CLAIMS
from sinkscope.reproduction.report import section_data

markdown_it = pytest.importorskip("markdown_it")

MODEL = "<svg onload=alert(1)>m|x"
CORPUS = "c.txt\n## 9. Forged heading\n| geometry | m | c | **supported** | forged |"


class Page(HTMLParser):
    """The start tags, the text of every h2 and the cells of every table row of a rendered page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.headings: list[str] = []
        self.rows: list[list[str]] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "h2":
            self._in, self.headings = "h2", [*self.headings, ""]
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._in = "cell"
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag in ("h2", "td", "th"):
            self._in = None

    def handle_data(self, data):
        if self._in == "h2":
            self.headings[-1] += data
        elif self._in == "cell":
            self.rows[-1][-1] += data


def report_markdown(model: str, corpus: str) -> str:
    """report.md as `reproduce` renders it, for one verdict of the first claim on `model` and `corpus`."""
    claim = next(iter(CLAIMS))
    verdict = {"claim": claim, "model": model, "corpus": corpus, "verdict": "not supported",
               "reason": f"{model} on {corpus} held in no layer", "evidence": {"corpus": corpus, "layers": 0},
               "interval": None, "sensitivity": [], "thresholds": {"tol": 0.1}}  # fmt: skip
    summary = {"config": {"models": [model], "corpora": [corpus], "seq_len": 8, "windows": 2, "anchor_windows": 2,
                          "quick": False}, "seconds": 1.0, "verdicts": [verdict]}  # fmt: skip
    return render_page("reproduce.md.j2", summary=summary, sections=section_data(summary, []), tables=[],
                       figures={}, regime_reason="", n_reused=0, model_note="")  # fmt: skip


def test_report_md_shows_hostile_names_as_text():
    page = Page()
    page.feed(markdown_it.MarkdownIt("commonmark").enable("table").render(report_markdown(MODEL, CORPUS)))
    assert "svg" not in page.tags  # the name is text, not a live tag
    assert not any("Forged" in heading for heading in page.headings), page.headings
    header, *rows = page.rows
    assert header == ["claim", "model", "corpus", "verdict", "reason"]
    assert len(rows) == 1, rows  # one verdict, one row: no row forged by the corpus's newline
    claim, model, corpus, verdict, reason = rows[0]
    assert model == MODEL and verdict == "not supported"  # the pipe stayed inside its cell
    assert corpus == " ".join(CORPUS.splitlines())  # the corpus, its line breaks as spaces
    assert reason == f"{MODEL} on {' '.join(CORPUS.splitlines())} held in no layer"


def test_report_md_keeps_a_plain_name_as_written():
    assert "| smollm2-135m | builtin:prose |" in report_markdown("smollm2-135m", "builtin:prose")


def svg_texts(svg: str) -> list[str]:
    """The text of every <text> element of an SVG written with svg.fonttype none (its tspans joined with '|')."""
    texts = []
    for element in re.findall(r"<text\b[^>]*>(.*?)</text>", svg, re.S):
        spans = re.findall(r"<tspan\b[^>]*>(.*?)</tspan>", element, re.S)
        texts.append("|".join(spans) if spans else element.strip())
    return texts


def test_a_saved_figure_draws_log_ticks_as_math_and_names_as_written():
    name = "price_$5_$ a$b$c"
    ratios = [1.0, 30.0, 700.0, 2000.0]  # the BOS norm ratio spans 10⁰ … 10³ on the log panel
    layers = pd.DataFrame({"layer": range(4), **{f"bos_cos_{s}_{k}": np.linspace(-0.2, 0.3, 4)
                                                  for s in ("mean", "max") for k in ("z", "h")},
                           "bos_norm_ratio_h": ratios, "bos_norm_ratio_z": [r / 2 for r in ratios]})  # fmt: skip
    token = FIGURE_LABEL.set(f"model {name} · corpus {name}.txt")  # the settings line stamped on every figure
    try:
        with no_mathtext():
            fig = bos_geometry(layers)
            fig.axes[0].set_xticks([0, 3], [f"{name}", "x$"])  # a text tick axis
            with matplotlib.rc_context({"svg.fonttype": "none"}):
                svg = figure_svg(fig).decode()
    finally:
        FIGURE_LABEL.reset(token)
    texts = svg_texts(svg)
    assert not any("mathdefault" in t or "$\\" in t for t in texts), [t for t in texts if "$" in t]
    assert f"model {name} · corpus {name}.txt" in texts and name in texts and "x$" in texts
    low, high = fig.axes[1].get_ylim()
    decades = {e for e in range(-3, 7) if low <= 10.0**e <= high}
    assert {0, 1, 2, 3} <= decades
    # mathtext draws 10² glyph by glyph, one tspan each: "1", "0", then the raised exponent's characters
    powers = [re.fullmatch(r"1\|0((?:\|[−\d])+)", t) for t in texts]
    drawn = {int("".join(m.group(1).split("|")).replace("−", "-")) for m in powers if m}
    assert drawn == decades, (drawn, decades)
