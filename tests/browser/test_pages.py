"""Every HTML page sinkscope writes, opened in a real headless Chromium: it loads with no console errors and no
network requests, every image renders, nothing is wider than a 1280 px window, no cell reads "None" or "nan",
no text names the internal spec, and the numbers shown equal the run's own tables.

The runs come from tiny random-weight models (a 2-layer Llama from a config, a 1-layer gBB lab model), so the
whole module takes seconds of model time.
"""

import json

import pandas as pd
import pytest

from sinkscope.cli.main import main

pytestmark = pytest.mark.browser


def page_facts(loaded) -> dict:
    page = loaded.page
    return {
        "title": page.title(),
        "text": page.inner_text("body"),
        "width": page.evaluate("() => document.documentElement.scrollWidth"),
        "cells": page.evaluate("() => [...document.querySelectorAll('td')].map(td => td.textContent.trim())"),
        "alts": page.evaluate("() => [...document.images].map(i => i.alt)"),
    }


def assert_readable(loaded) -> dict:
    loaded.assert_clean()
    loaded.assert_images_render()
    facts = page_facts(loaded)
    assert facts["width"] <= 1280, f"page is {facts['width']} px wide"
    assert not [c for c in facts["cells"] if c in ("None", "nan", "NaN", "")], facts["cells"]
    assert "SPEC" not in facts["text"]
    assert all(facts["alts"]), "every image has a caption"
    return facts


def summary_row(facts: dict, n_columns: int = 13) -> list[str]:
    return facts["cells"][:n_columns]


def test_analyze_report_loads_cleanly_and_shows_the_runs_numbers(runs, open_page):
    run = runs / "prose_run"
    meta = json.loads((run / "run.json").read_text())
    heads = pd.read_parquet(run / "heads.parquet")
    layers = pd.read_parquet(run / "layers.parquet")
    facts = assert_readable(open_page(run / "report.html"))
    assert meta["model"]["name"] in facts["title"] and "T=16" in facts["title"]
    row = summary_row(facts)
    assert row[1] == meta["model"]["name"] and row[3] == "16" and row[4] == str(meta["corpus"]["windows"]) == "6"
    assert row[5] == "0.3" and row[6] == f"{meta['summary']['sink_rate']:.3f}"
    assert row[7] == f"{meta['summary']['sink_rate_of_mean']:.3f}"
    assert row[8] == f"{heads['sink_score'].mean():.3f}"
    assert row[9] == f"{heads['diag_score'].mean():.3f}"
    assert row[10] == f"{layers['mlp_like_frac'].mean():.3f}"
    for head_class, count in heads["head_class"].value_counts().items():
        assert f"{head_class} {count}" in row[11]
    assert len(facts["alts"]) >= 5
    assert sorted(p.name for p in (run / "figures").glob("*.svg")) == sorted(
        p.with_suffix(".svg").name for p in (run / "figures").glob("*.png"))  # vector beside every PNG


def test_analyze_closing_line_says_what_the_numbers_mean_and_threads_are_recorded(runs):
    meta = json.loads((runs / "random_run" / "run.json").read_text())
    line = (runs / "random_run" / "printed.txt").read_text().strip().splitlines()[-1]
    s = meta["summary"]
    assert meta["timings"]["threads"] == 1  # --threads 1, recorded in run.json
    assert line.startswith("model on builtin:random (T=16, 4 windows): ")
    assert f"sink rate {s['sink_rate']:.3f}: in {s['sink_rate']:.1%} of (window, layer, head) the head gave BOS more " \
           "than ε = 0.3 of its attention" in line
    assert f"on average a head gives {s['mean_sink_score']:.3f} of its attention to BOS" in line
    assert f"and {s['mean_diag_score']:.3f} to the token itself" in line and "docs/statistics.md" in line


def test_report_page_at_1280_fits_and_the_screenshot_renders(runs, open_page, tmp_path):
    loaded = open_page(runs / "prose_run" / "report.html", viewport=(1280, 900))
    shot = tmp_path / "report.png"
    loaded.page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000


def test_comparison_page_table_and_shared_depth_figures_for_three_runs(runs, open_page):
    loaded = open_page(runs / "cmp.html")
    facts = assert_readable(loaded)
    names = ["prose_run", "random_run", "deep_run"]
    assert facts["title"] == "sinkscope comparison: " + " vs ".join(names)  # names, not full paths
    page = loaded.page
    table = page.evaluate("""() => [...document.querySelector('#summary ~ table').rows]
        .map(r => ({title: r.title, cells: [...r.cells].map(c => c.firstChild ? c.firstChild.textContent : '')}))""")
    header, rows = table[0]["cells"], table[1:]
    assert [r["cells"][0] for r in rows] == names and [r["title"] for r in rows] == [str(runs / n) for n in names]
    metas = [json.loads((runs / n / "run.json").read_text()) for n in names]
    column = {name: header.index(name) for name in ("sink rate", "Δ sink rate", "mean diag", "Δ mean diag")}
    for row, meta in zip(rows, metas):
        cells = row["cells"]
        assert cells[column["sink rate"]] == f"{meta['summary']['sink_rate']:.3f}"
        assert cells[column["mean diag"]] == f"{meta['summary']['mean_diag_score']:.3f}"
    first = metas[0]["summary"]["mean_diag_score"]
    for row, meta in zip(rows[1:], metas[1:]):
        shown = float(row["cells"][column["Δ mean diag"]])
        assert shown == pytest.approx(meta["summary"]["mean_diag_score"] - first, abs=5e-4)
    assert rows[0]["cells"][column["Δ sink rate"]] == "–"
    # Head classes side by side: counts equal each run's heads.parquet.
    classes = page.evaluate("""() => [...document.querySelector('#classes + table').rows]
        .map(r => [...r.cells].map(c => c.textContent))""")
    assert classes[0] == ["class", *names]
    for row in classes[1:]:
        for name, cell in zip(names, row[1:]):
            count = (pd.read_parquet(runs / name / "heads.parquet")["head_class"] == row[0]).sum()
            assert cell.startswith(f"{count} (")
    # The shared-depth figure, one per-head difference (prose_run and random_run share a model; deep_run does
    # not), one row of secondary sinks per run.
    assert "Sink rate, diagonal score and BOS cosine per layer against relative depth" in facts["alts"]
    differences = [alt for alt in facts["alts"] if alt.startswith("Per-head difference")]
    assert differences == ["Per-head difference: random_run − prose_run (model)"]
    sinks = page.evaluate("() => [...document.querySelector('#secondary-sinks + table').rows].slice(1).map(r => r.cells[0].textContent)")
    assert sinks == names
    # Each run's own report is folded below, closed.
    assert page.evaluate("() => [...document.querySelectorAll('details.run')].map(d => d.open)") == [False] * 3


def test_comparison_depth_figure_puts_every_run_on_one_relative_depth_axis(runs, monkeypatch):
    """The figure's data: three lines per panel, x = layer / (L − 1) (0, 1 for 2 layers; 0, 0.5, 1 for 3) and y the
    run's own per-layer sink rate, mean diagonal score and BOS cosine."""
    from sinkscope.pipelines.run import Run
    from sinkscope.report import compare

    drawn = []
    monkeypatch.setattr(compare, "figure_png", lambda fig: drawn.append(fig) or b"")
    loaded = [Run.load(runs / name) for name in ("prose_run", "random_run", "deep_run")]
    compare.comparison(loaded, ["a", "b", "c"])
    depth = drawn[0]
    assert [ax.get_xlabel() for ax in depth.axes] == ["relative depth: layer / (L − 1)"] * 3
    for ax, column in zip(depth.axes, ("sink_rate", "diag", "bos_cos_mean_z")):
        lines = [line for line in ax.get_lines() if line.get_label() in ("a", "b", "c")]
        assert len(lines) == 3
        for line, run in zip(lines, loaded):
            L = len(run.layers)
            assert list(line.get_xdata()) == pytest.approx([layer / (L - 1) for layer in range(L)])
            expected = (run.heads.groupby("layer")["diag_score"].mean() if column == "diag" else run.layers[column])
            assert list(line.get_ydata()) == pytest.approx(list(expected))


def assert_every_header_is_defined(page, path) -> None:
    """Every column header has a hover definition naming its document section, and its link lands on the
    definition in the page's Definitions list."""
    headers = page.evaluate("""() => [...document.querySelectorAll('th')].map(th => {
        const link = th.querySelector('a.def');
        const target = link && document.getElementById(link.getAttribute('href').slice(1));
        return {text: th.textContent, title: th.title, target: target ? target.textContent : null}; })""")
    assert len(headers) >= 5, path
    for header in headers:
        assert header["title"] and "§" in header["title"], (path.name, header)
        assert header["target"] is not None, (path.name, header)


def test_every_column_header_has_a_hover_definition(runs, open_page, tmp_path):
    from sinkscope.pipelines.sweep import SweepConfig, sweep

    config = SweepConfig(models=(str(runs / "model"),), corpora=(str(runs / "corpus.txt"),), seq_lens=(8,),
                         epsilons=(0.1, 0.3), max_windows=2, batch_size=2)  # fmt: skip
    sweep(config, tmp_path / "sw", progress=False)
    for path in (runs / "prose_run" / "report.html", runs / "cmp.html", tmp_path / "sw" / "report.html"):
        page = open_page(path).page
        assert_every_header_is_defined(page, path)
    # The single-T sweep says why it has no T plot instead of drawing one dot per corpus.
    assert "One window length (T = 8): no plot against T" in page.inner_text("body")
    assert page.evaluate("() => document.images.length") == 1


def test_no_table_is_wider_than_a_1280_px_window(runs, open_page):
    for path in (runs / "prose_run" / "report.html", runs / "cmp.html"):
        page = open_page(path, viewport=(1280, 900)).page
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        widths = page.evaluate("""() => [...document.querySelectorAll('table')].map(t =>
            ({right: t.getBoundingClientRect().right, scroll: t.scrollWidth, client: t.clientWidth}))""")
        for width in widths:
            assert width["right"] <= 1280 and width["scroll"] <= width["client"], (path.name, width)


def test_no_figure_is_drawn_twice_and_no_layer_axis_has_fractional_ticks(runs, open_page, monkeypatch, tmp_path):
    """Every figure of the analyze report (all sections, --smoothing included) and of the comparison: a layer
    axis carries integer ticks only; the page shows no image or caption twice and no heading about ablations
    without an ablation."""
    from sinkscope.pipelines.run import Run
    from sinkscope.report import compare, plots, smoothing_section, switch_section, tokens_section
    from sinkscope.report import html as report_html

    drawn, real = [], plots.figure_png
    for module in (plots, smoothing_section, switch_section, tokens_section, compare):
        monkeypatch.setattr(module, "figure_png", lambda fig: drawn.append(fig) or real(fig))
    loaded = [Run.load(runs / name) for name in ("prose_run", "random_run", "deep_run")]
    report_html.write_report(loaded[:1], tmp_path / "one.html")
    report_html.write_report(loaded, tmp_path / "cmp.html")
    checked = 0
    for fig in drawn:
        for ax in fig.axes:
            for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
                if label == "layer":
                    low, high = sorted(axis.get_view_interval())
                    ticks = [t for t in axis.get_ticklocs() if low <= t <= high]
                    assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
                    checked += 1
    assert checked >= 8
    for path in (runs / "prose_run" / "report.html", runs / "cmp.html"):
        page = open_page(path).page
        sources = page.evaluate("() => [...document.images].map(i => i.src)")
        captions = page.evaluate("() => [...document.querySelectorAll('figcaption')].map(c => c.textContent)")
        if path.name == "report.html":  # one run: every figure once (the comparison folds three runs' reports)
            assert len(set(sources)) == len(sources) and len(set(captions)) == len(captions), captions
            assert sum("BOS cosine" in c or "BOS geometry" in c for c in captions) == 1
        assert "ablations" not in page.inner_text("body").lower()


def test_train_bb_page_loads_cleanly_and_shows_the_summary(tmp_path, open_page):
    out = tmp_path / "bb"
    code = main(["train-bb", "--out", str(out), "--steps", "30", "--eval-every", "15", "--layers", "1",
                 "--heads", "2", "--d-model", "16", "--length", "16", "--vocab-size", "12", "--triggers", "2",
                 "--batch-size", "8", "--quiet"])  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    facts = assert_readable(open_page(out / "report.html"))
    assert f"{summary['loss']:.4g}" in facts["cells"] and str(summary["final_step"]) in facts["cells"]
    page = open_page(out / "report.html").page
    alts = page.eval_on_selector_all("figure img", "els => els.map(e => e.alt)")
    captions = page.eval_on_selector_all("figcaption", "els => els.map(e => e.textContent)")
    assert len(alts) == len(captions) == 7
    assert all("T=16" in text and "1L×2H d=16" in text and "V=12 K=2" in text for text in alts + captions)
    assert_every_header_is_defined(page, out / "report.html")



def test_every_figure_of_the_report_labels_its_axes_and_names_model_corpus_and_T(runs, tmp_path, monkeypatch):
    """Draw the report of the run (all its sections: tokens, switch, geometry, oversmoothing) and inspect every
    matplotlib figure before it becomes a PNG."""
    from sinkscope.pipelines.run import Run
    from sinkscope.report import html as report_html
    from sinkscope.report import plots, smoothing_section, switch_section, tokens_section

    drawn, real = [], plots.figure_png

    def keep(fig):
        png = real(fig)
        drawn.append(fig)
        return png

    for module in (plots, smoothing_section, switch_section, tokens_section):
        if hasattr(module, "figure_png"):
            monkeypatch.setattr(module, "figure_png", keep)
    run = Run.load(runs / "prose_run")
    report_html.write_report([run], tmp_path / "r.html")
    assert len(drawn) >= 8
    label = report_html.figure_label(run)
    for fig in drawn:
        title = " / ".join(ax.get_title() for ax in fig.axes)
        assert label in [t.get_text() for t in fig.texts], title
        for ax in fig.axes:
            assert not ax.get_visible() or ax.get_ylabel(), f"unlabelled y axis or colorbar in: {title}"


def test_ablation_section_loads_cleanly_and_shows_the_curve(runs, tmp_path, open_page):
    """`sinkscope ablate`'s ablation.parquet, put in a run directory, adds the ablation figure and table to that
    run's report (its own page is tested below)."""
    import shutil

    model, corpus = runs / "model", runs / "corpus.txt"
    code = main(["ablate", "--model", str(model), "--corpus", str(corpus), "--seq-len", "16", "--max-windows", "4",
                 "--score-windows", "2", "--fractions", "0.25", "--random-draws", "2", "--out", str(tmp_path / "abl")])
    assert code == 0
    run = tmp_path / "with_ablation"
    shutil.copytree(runs / "prose_run", run)
    shutil.copy(tmp_path / "abl" / "ablation.parquet", run)
    assert main(["report", str(run)]) == 0
    facts = assert_readable(open_page(run / "report.html"))
    assert "Loss change when heads are switched off" in facts["alts"]
    curve = pd.read_parquet(run / "ablation.parquet")
    for (selection, _), rows in curve.groupby(["selection", "fraction"]):
        assert f"{rows['delta_loss'].mean():+.4f}" in facts["cells"], selection


def test_ablate_page_loads_cleanly_and_shows_every_set(runs, tmp_path, open_page):
    model, corpus = runs / "model", runs / "corpus.txt"
    code = main(["ablate", "--model", str(model), "--corpus", str(corpus), "--seq-len", "16", "--max-windows", "4",
                 "--score-windows", "2", "--fractions", "0.25,0.5", "--random-draws", "2", "--out",
                 str(tmp_path / "abl")])  # fmt: skip
    assert code == 0
    loaded = open_page(tmp_path / "abl" / "report.html")
    facts = assert_readable(loaded)
    assert_every_header_is_defined(loaded.page, tmp_path / "abl" / "report.html")
    assert "sinkscope ablate: model" == facts["title"]
    assert loaded.page.evaluate("() => getComputedStyle(document.body).maxWidth") == "1100px"  # the house style
    curve = pd.read_parquet(tmp_path / "abl" / "ablation.parquet")
    tables = loaded.page.evaluate(
        "() => [...document.querySelectorAll('table')].map(t => [...t.rows].map(r => [...r.cells].map(c => c.textContent)))"
    )
    every_set = tables[-1]
    assert len(every_set) == len(curve) + 1  # header + one row per ablated set
    column = every_set[0].index("delta_loss")
    for row, delta in zip(every_set[1:], curve["delta_loss"]):
        assert float(row[column]) == pytest.approx(delta, rel=1e-3, abs=1e-6)
    summary = tables[1]
    n_random = [r for r in summary[1:] if r[0] == "random"]
    assert len(n_random) == 2 and all(r[summary[0].index("draws")] == "2" for r in n_random)


def test_cost_page_loads_cleanly_and_shows_every_setting(tmp_path, open_page):
    from sinkscope.pipelines.cost_sweep import CostSweepConfig, run_cost_sweep

    config = CostSweepConfig(families=("orthonormal", "gaussian"), Ts=(2, 4), ds=(3, 6), seeds=1)
    frame = run_cost_sweep(config, tmp_path / "cost")
    loaded = open_page(tmp_path / "cost" / "report.html")
    facts = assert_readable(loaded)
    assert_every_header_is_defined(loaded.page, tmp_path / "cost" / "report.html")
    assert facts["title"] == "sinkscope cost: orthonormal, gaussian"
    assert loaded.page.evaluate("() => document.images.length") == 3
    rows = loaded.page.evaluate(
        "() => [...[...document.querySelectorAll('table')].at(-1).rows].map(r => [...r.cells].map(c => c.textContent))"
    )
    header, rows = rows[0], rows[1:]
    assert len(rows) == len(frame)
    for row, cost in zip(rows, frame["cost"]):
        shown = row[header.index("cost")]
        assert shown == "inf" if cost == float("inf") else float(shown) == pytest.approx(cost, rel=1e-3)
    closed = frame["closed_form"].notna()
    assert closed.any() and (~closed).any()  # orthonormal rows have a closed form, gaussian rows show a dash
    assert all(r[header.index("closed_form")] == "–" for r, c in zip(rows, closed) if not c)
