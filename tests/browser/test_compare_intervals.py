"""The comparison page's Δ intervals (issue 35), in a real headless Chromium at 1280 px.

The shared runs (conftest.py `runs`): `prose_run` (6 windows of a text), `random_run` (4 windows of random
tokens: the sample note names the difference) and `deep_run` (another model on the same 6 windows: a paired
interval). Each interval is checked against the runs' own per-window tables: it contains its Δ, and its
half-width is within a factor of the normal-theory 1.96·√(s²_a/n_a + s²_b/n_b) (independent) or
1.96·s_d/√n (paired differences d) computed here with numpy. A run without windows.parquet (made before it
existed) gets "no interval: per-window data not stored". (The tiny random models give nearly equal numbers in
every window, so the shared runs' intervals are nearly zero-wide: a run with a spread per-window table checks the
width.)
"""

import contextlib
import io
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from sinkscope.cli.main import main

pytestmark = pytest.mark.browser
NAMES = ["prose_run", "random_run", "deep_run"]


def summary_rows(page) -> list[list[dict]]:
    return page.evaluate("""() => [...document.querySelector('#summary ~ table').rows].map(r => [...r.cells].map(c =>
        ({value: c.firstChild ? c.firstChild.textContent : '', interval: (c.querySelector('.interval') || {}).textContent,
          title: c.title})))""")


def test_intervals_contain_each_delta_with_a_bootstrap_width(runs, open_page):
    loaded = open_page(runs / "cmp.html", viewport=(1280, 900))
    page = loaded.page
    table = summary_rows(page)
    header = [c["value"] for c in table[0]]
    rows = {row[0]["value"]: row for row in table[1:]}
    assert list(rows) == NAMES
    windows = {n: pd.read_parquet(runs / n / "windows.parquet") for n in NAMES}
    for column, key in (("Δ sink rate", "sink_rate"), ("Δ mean sink", "mean_sink_score"),
                        ("Δ mean diag", "mean_diag_score")):  # fmt: skip
        at = header.index(column)
        assert rows["prose_run"][at]["value"] == "–" and rows["prose_run"][at]["interval"] is None
        a = windows["prose_run"][key].to_numpy()
        for name, paired in (("random_run", False), ("deep_run", True)):
            b = windows[name][key].to_numpy()
            summary = json.loads((runs / name / "run.json").read_text())["summary"]
            assert b.mean() == pytest.approx(summary[key], abs=1e-7)  # the per-window table averages to the summary
            cell = rows[name][at]
            delta = float(cell["value"])
            low, high = (float(x) for x in cell["interval"].strip("[]").split(",\u00a0"))
            assert low <= delta + 5e-4 and delta - 5e-4 <= high, (name, column, cell)
            if paired:
                assert "paired" in cell["title"] and "6 and 6 windows" in cell["title"]
                normal = 1.96 * (b - a).std(ddof=1) / np.sqrt(len(a))
            else:
                assert "on their own" in cell["title"] and "4 and 6 windows" in cell["title"]
                normal = 1.96 * np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
            if normal > 1e-3:  # (a rate that is 0 in every window has a zero-width interval)
                assert 0.4 * normal <= (high - low) / 2 <= 1.6 * normal, (name, column, cell, normal)
    assert "differ in windows (prose_run 6, random_run 4, deep_run 6)" in page.inner_text("#sample-note")
    width = page.evaluate("""() => { const t = document.querySelector('#summary ~ table');
        return {right: t.getBoundingClientRect().right, scroll: t.scrollWidth, client: t.clientWidth,
                page: document.documentElement.scrollWidth}; }""")
    assert width["right"] <= 1280 and width["scroll"] <= width["client"] and width["page"] <= 1280, width
    loaded.assert_clean()


def test_a_run_without_per_window_data_says_so_and_spread_gives_a_normal_width(runs, open_page, tmp_path):
    """`old_run`: random_run without windows.parquet. `spread_run`: random_run with a per-window table of 40 windows
    whose values spread (the tiny random models give nearly the same numbers in every window, so the shared runs'
    intervals are nearly zero-wide) and run.json's summary set to their means: its interval's half-width is within
    a factor of the normal-theory one computed here."""
    shutil.copytree(runs / "random_run", tmp_path / "old_run")
    (tmp_path / "old_run" / "windows.parquet").unlink()
    shutil.copytree(runs / "random_run", tmp_path / "spread_run")
    rng = np.random.default_rng(3)
    spread = pd.DataFrame({"window": np.arange(40), "sink_rate": rng.uniform(0, 1, 40),
                           "mean_sink_score": rng.normal(0.4, 0.1, 40), "mean_diag_score": rng.normal(0.2, 0.05, 40),
                           "mlp_like_frac": 0.0, "tokens_hash": np.arange(40) + 10**6})  # fmt: skip
    spread.to_parquet(tmp_path / "spread_run" / "windows.parquet", index=False)
    meta = json.loads((tmp_path / "spread_run" / "run.json").read_text())
    meta["corpus"]["windows"] = 40
    for key in ("sink_rate", "mean_sink_score", "mean_diag_score"):
        meta["summary"][key] = float(spread[key].mean())
    (tmp_path / "spread_run" / "run.json").write_text(json.dumps(meta))
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(runs / "prose_run"), str(tmp_path / "old_run"), str(tmp_path / "spread_run"),
                     "--out", str(tmp_path / "c.html")]) == 0  # fmt: skip
    loaded = open_page(tmp_path / "c.html", viewport=(1280, 900))
    table = summary_rows(loaded.page)
    header = [c["value"] for c in table[0]]
    intervals = [c["interval"] for c in table[2] if c["interval"] is not None]
    assert intervals == ["no interval: per-window data not stored"] * 3, table[2]
    a_all = pd.read_parquet(runs / "prose_run" / "windows.parquet")
    for column, key in (("Δ sink rate", "sink_rate"), ("Δ mean sink", "mean_sink_score"),
                        ("Δ mean diag", "mean_diag_score")):  # fmt: skip
        cell = table[3][header.index(column)]
        a, b = a_all[key].to_numpy(), spread[key].to_numpy()
        low, high = (float(x) for x in cell["interval"].strip("[]").split(",\u00a0"))
        normal = 1.96 * np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        assert low <= float(cell["value"]) <= high and "40 and 6 windows" in cell["title"], cell
        assert 0.7 * normal <= (high - low) / 2 <= 1.3 * normal, (column, cell, normal)
    loaded.assert_clean()


def test_head_class_cell_of_a_real_sized_model_wraps_to_few_lines(runs, open_page):
    """Issue 35: Gemma's head-class cell ("sink 57, dense 45, …") wrapped to 7 lines in a squeezed column; with a
    realistic text in it the cell keeps to 3 lines and the table still fits 1280 px."""
    loaded = open_page(runs / "prose_run" / "report.html", viewport=(1280, 900))
    facts = loaded.page.evaluate("""() => { const td = document.querySelector('td.classes');
        td.textContent = 'sink 57, dense 45, mixed 32, previous-token 7, diagonal 3';
        const t = td.closest('table'), lines = td.getBoundingClientRect().height / parseFloat(getComputedStyle(td).lineHeight);
        return {lines, right: t.getBoundingClientRect().right, scroll: t.scrollWidth, client: t.clientWidth}; }""")
    assert facts["lines"] <= 3.5 and facts["right"] <= 1280 and facts["scroll"] <= facts["client"], facts
    loaded.assert_clean()
