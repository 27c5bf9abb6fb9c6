"""The analyze report / comparison page (report/html.py + templates/report.html.j2): user text is escaped, the
numbers are the run's, the template ships as package data, and drawing a report leaves pyplot alone."""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser
from types import SimpleNamespace

from test_readable_output import tiny_tables

from sinkscope.report.html import render_report


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.cells, self._in_td = [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_td = tag == "td"

    def handle_data(self, data):
        if self._in_td:
            self.cells.append(data)
            self._in_td = False


def _run(directory: str):
    heads, layers, positions = tiny_tables()
    layers["mlp_like_frac"] = [0.25, 0.5, 0.75]
    meta = {
        "directory": directory,
        "model": {"name": "tiny<model>", "dtype": "float32"},
        "corpus": {"source": "a&b.txt", "seq_len": 8, "windows": 3, "bos_id": 1},
        "summary": {"sink_rate": 0.125, "epsilon": 0.3, "mean_sink_score": 0.5, "mean_diag_score": 0.25,
                    "head_classes": {"sink": 4, "dense": 4, "mixed": 4}},  # fmt: skip
    }
    return SimpleNamespace(meta=meta, heads=heads, layers=layers, positions=positions, extra={}, name="tiny")


def test_user_text_is_escaped_and_the_cells_are_the_runs_numbers():
    second = _run("runs/b")
    second.meta["summary"] = {**second.meta["summary"], "sink_rate": 0.5, "mean_diag_score": 0.125}
    page = render_report([_run("runs/<script>x</script>"), second])
    parsed = _Cells()
    parsed.feed(page)
    assert "script" not in parsed.tags and "model" not in parsed.tags
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&amp;b.txt" in page
    assert 'title="runs/&lt;script&gt;x&lt;/script&gt;"' in page  # the full directory: the row's hover
    first, other = parsed.cells[:14], parsed.cells[14:28]
    assert first[:5] == ["script>", "tiny<model>", "a&b.txt", "8", "3"]  # the shortest distinct name
    assert first[5:9] == ["0.125", "–", "–", "0.500"]  # no difference for the first run; no of-mean: a dash
    assert first[12] == "0.500"  # mlp_like_frac mean of .25, .5, .75
    assert first[13] == "–"  # no timing: an en dash, never 'None'
    assert other[0] == "b" and other[6] == "+0.375" and other[9] == "0.000" and other[11] == "-0.125"


def test_template_is_package_data_and_report_drawing_leaves_pyplot_unimported():
    code = (
        "import sys, importlib.resources as r\n"
        "assert r.files('sinkscope.report').joinpath('templates/report.html.j2').is_file()\n"
        "import matplotlib\n"
        "backend = matplotlib.rcParams._get_backend_or_none()\n"
        "import sinkscope.report.html, sinkscope.report.sweep_page\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
        "assert matplotlib.rcParams._get_backend_or_none() == backend, 'backend switched at import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
