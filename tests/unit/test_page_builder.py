"""The one page builder (`sinkscope.report.page`, issue 10): every page template extends `base.html.j2` and renders
through `render_page`; HTML is escaped and Markdown is not; only the builder makes a Jinja2 environment; no module
under src/ uses pyplot or switches the matplotlib backend (figures are `Figure` objects); and no module under report/
writes HTML tags in Python strings (code builds data, templates build markup)."""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path

import pytest
from jinja2 import UndefinedError, nodes

from sinkscope.report.page import cell_text, environment, png_figure, render_page

SRC = Path(__file__).resolve().parents[2] / "src" / "sinkscope"
TEMPLATES = SRC / "report" / "templates"
MARKER = '<meta name="generator" content="sinkscope page builder">'
# The skeleton, the shared macros and the report's section macros: parts of pages, not pages.
PARTS = {"base.html.j2", "macros.html.j2", *(p.name for p in TEMPLATES.glob("*_section.html.j2"))}

# The smallest context each page renders with (StrictUndefined: a field the template reads and this lacks fails).
_CELL = {"sink": 0.9, "diag": 0.1, "cls": "sink", "sinks": [[1, 0.2]]}
_LAYER = {"cos_z_mean": 0.1, "norm_ratio_h": 3.0, "mlp_like": 0.5}
CONTEXTS = {
    "report.html.j2": {"heading": "H <1>", "summary": {"header": ["run"], "rows": [["x"]], "titles": ["d"]},
                       "comparison": None, "runs": [], "terms": []},
    "sweep.html.j2": {"models": "H <1>", "figures": [], "header": ["sink_rate"], "rows": [["0.5"]],
                      "single_length": None, "terms": []},
    "train_bb.html.j2": {"summary": {"heads_line": "H <1>", "copy_head": {"layer": 0, "head": 1, "pattern": "copy"},
                                     "switch_head": {"layer": 0, "head": 0, "pattern": "sink"}},
                         "tables": {"headline": None, "heads": None, "predictions": None}, "figures": [],
                         "config": "{}", "terms": []},
    "reproduce.html.j2": {"summary": {"config": {"models": ["H <1>"], "corpora": ["c"], "seq_len": 8, "windows": 2,
                                                 "anchor_windows": 1, "quick": False},
                                      "seconds": 1.0, "verdicts": []},
                          "tables": [], "sections": [], "figures": {}, "n_reused": 0, "model_note": "H <1>"},
    "view.html.j2": {"data": {"model": {"name": "H <1>"}, "n_layers": 1, "n_heads": 1, "n_tokens": 2, "ids": [1, 2],
                              "tokens": ["<s>", "a"], "heads": [[_CELL]], "layers": [_LAYER],
                              "thresholds": {"epsilon": 0.3}, "open": {"layer": 0, "head": 0}, "linear_layers": [],
                              "quant": {"bits": 8, "error": 2e-3, "shown_error": 2.5e-3}},
                     "data_json": "{}", "maps": ""},
    "trajectory.html.j2": {"model": "H <1>", "steps": 2, "first": 0, "last": 10, "windows": 1, "corpus": "c",
                           "seq_len": 8, "probe_sha": "0123456789ab", "epsilon": 0.3, "diagonal": 0.5, "command": "c",
                           "figures": [], "step_header": ["step"], "step_rows": [["0"]],
                           "emergence_header": ["layer", "head", "pattern"], "emergence_rows": [], "terms": []},
    "results.html.j2": {"title": "H <1>", "intro": "i", "settings": [["model", "m"]], "figures": [],
                        "settings_header": ["setting", "value"], "terms": [],
                        "tables": [{"caption": "c", "header": ["x"], "rows": [["1"]], "classes": ["num"]}]},
}  # fmt: skip


def page_templates() -> list[str]:
    return sorted(p.name for p in TEMPLATES.glob("*.html.j2") if p.name not in PARTS)


def test_every_page_template_has_a_context_here():
    assert page_templates() == sorted(CONTEXTS)


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_every_page_extends_base_and_renders_through_the_builder(name):
    env = environment()
    tree = env.parse(env.loader.get_source(env, name)[0])
    extends = list(tree.find_all(nodes.Extends))
    assert [e.template.value for e in extends] == ["base.html.j2"], f"{name} must extend base.html.j2"
    page = render_page(name, **CONTEXTS[name])
    assert page.startswith("<!doctype html>") and page.count(MARKER) == 1
    assert "<meta charset=\"utf-8\">" in page and page.rstrip().endswith("</html>")
    assert "H &lt;1&gt;" in page and "H <1>" not in page  # user text escaped by the one environment


def test_a_missing_field_fails_the_render_instead_of_printing_nothing():
    context = dict(CONTEXTS["sweep.html.j2"])
    del context["models"]
    with pytest.raises(UndefinedError):
        render_page("sweep.html.j2", **context)


def test_markdown_escapes_a_name_once():
    summary = {"config": {"models": ["a<b>&c"], "corpora": ["c"], "seq_len": 8, "windows": 2, "anchor_windows": 1,
                          "quick": False}, "seconds": 1.0, "verdicts": []}  # fmt: skip
    text = render_page("reproduce.md.j2", summary=summary, tables=[], sections=[], n_reused=0, model_note="")
    assert "Models: a&lt;b&gt;&amp;c ·" in text  # the md filter's entities, not HTML autoescape on top of them


def test_helpers():
    figure = png_figure(b"\x89PNG", "a <caption>")
    assert figure == {"data": "iVBORw==", "caption": "a <caption>", "alt": "a <caption>"}
    assert png_figure(b"", "c", alt="a")["alt"] == "a"
    assert [cell_text(v) for v in (None, float("nan"), 0.5, 3, "x")] == ["–", "–", "0.5", "3", "x"]
    page = render_page("sweep.html.j2", **CONTEXTS["sweep.html.j2"] | {"figures": [figure]})
    assert f'<figcaption>{html.escape("a <caption>")}</figcaption>' in page
    assert 'src="data:image/png;base64,iVBORw=="' in page


def _sources() -> dict[str, ast.Module]:
    return {str(p.relative_to(SRC)): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))}


def _imports(tree: ast.Module) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_no_module_uses_pyplot_or_switches_the_backend():
    offenders = []
    for name, tree in _sources().items():
        if "matplotlib.pyplot" in _imports(tree) or "pylab" in {i.split(".")[0] for i in _imports(tree)}:
            offenders.append(f"{name}: imports matplotlib.pyplot")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "use"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("matplotlib", "mpl")):
                offenders.append(f"{name}:{node.lineno}: matplotlib.use")  # fmt: skip
    assert offenders == []


def test_only_the_page_builder_makes_a_jinja2_environment():
    users = sorted(name for name, tree in _sources().items() if any(i.split(".")[0] == "jinja2" for i in _imports(tree)))
    assert users == ["report/page.py"]


def test_the_checks_above_can_fail():
    bad = ast.parse("import matplotlib\nmatplotlib.use('Agg')\nfrom matplotlib import pyplot\n")
    assert "matplotlib.pyplot" in _imports(bad)
    assert any(isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "use" for n in ast.walk(bad))


# An opening or closing tag of the elements a page is made of, e.g. "<tr>", "</td>", "<p class=", "<img src=".
HTML_TAG = re.compile(r"</?(?:table|tr|td|th|h[1-6]|p|figure|figcaption|img|details|summary|div|span|ul|ol|li|a|b|br|"
                      r"code|pre|section)(?=[\s>/])")  # fmt: skip


def _html_strings(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of every string constant, f-string parts included, that holds an HTML tag; docstrings, which
    describe markup rather than build it, are skipped."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and HTML_TAG.search(node.value)]  # fmt: skip


def test_no_report_module_builds_html_in_python_strings():
    offenders = [f"{name}:{line}: {text[:60]!r}" for name, tree in _sources().items() if name.startswith("report/")
                 for line, text in _html_strings(tree)]  # fmt: skip
    assert offenders == [], "build the markup in report/templates/, not in Python strings"


def test_the_html_string_check_can_fail():
    bad = ast.parse('''
def section(rows, title):
    """A `<table>` of rows (a docstring may name tags)."""
    head = "<h3>Tokens</h3><p class='note'>sorted</p>"
    return head + f"<table>{''.join(f'<tr><td>{r}</td></tr>' for r in rows)}</table>" + f'<img src="{title}">'
''')
    found = sorted(text for _, text in _html_strings(bad))
    assert found == sorted(["<h3>Tokens</h3><p class='note'>sorted</p>", "<table>", "</table>", "<tr><td>",
                            "</td></tr>", '<img src="'])  # fmt: skip
    harmless = ast.parse('x = "2b + c > 0 for <s> and <pad>, a <= b"\nlabel = f"L{layer}H{head}"\n')
    assert _html_strings(harmless) == []
