"""Every HTML page sinkscope writes, opened in a real headless Chromium: it loads with no console errors and no
network requests, every image renders, nothing is wider than a 1280 px window, no cell reads "None" or "nan",
no text names the internal spec, and the numbers shown equal the run's own tables.

The runs come from tiny random-weight models (a 2-layer Llama from a config, a 1-layer gBB lab model), so the
whole module takes seconds of model time.
"""

import json

import pandas as pd
import pytest

from integration.tiny_checkpoint import save_tiny_llama, write_corpus
from sinkscope.cli.main import main

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two analyze runs of a tiny Llama (a text corpus and random tokens) and their comparison page."""
    root = tmp_path_factory.mktemp("pages")
    model, corpus = save_tiny_llama(root / "model"), write_corpus(root / "corpus.txt", documents=60)
    for name, source, extra in (("prose_run", str(corpus), ["--smoothing"]), ("random_run", "builtin:random", [])):
        code = main(["analyze", "--model", str(model), "--corpus", source, "--seq-len", "16", "--max-windows", "6",
                     "--geometry-cap", "24", "--out", str(root / name), "--quiet", *extra])  # fmt: skip
        assert code == 0
    assert main(["report", str(root / "prose_run"), str(root / "random_run"), "--out", str(root / "cmp.html")]) == 0
    return root


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


def summary_row(facts: dict, n_columns: int = 11) -> list[str]:
    return facts["cells"][:n_columns]


def test_analyze_report_loads_cleanly_and_shows_the_runs_numbers(runs, open_page):
    run = runs / "prose_run"
    meta = json.loads((run / "run.json").read_text())
    heads = pd.read_parquet(run / "heads.parquet")
    layers = pd.read_parquet(run / "layers.parquet")
    facts = assert_readable(open_page(run / "report.html"))
    assert meta["model"]["name"] in facts["title"] and "T=16" in facts["title"]
    row = summary_row(facts)
    assert row[3] == "16" and row[4] == str(meta["corpus"]["windows"]) == "6"
    assert row[5].startswith(f"{meta['summary']['sink_rate']:.3f} (ε=0.3)")
    assert row[6] == f"{heads['sink_score'].mean():.3f}"
    assert row[7] == f"{heads['diag_score'].mean():.3f}"
    assert row[8] == f"{layers['mlp_like_frac'].mean():.3f}"
    for head_class, count in heads["head_class"].value_counts().items():
        assert f"{head_class} {count}" in row[9]
    assert len(facts["alts"]) >= 5


def test_report_page_at_1280_fits_and_the_screenshot_renders(runs, open_page, tmp_path):
    loaded = open_page(runs / "prose_run" / "report.html", viewport=(1280, 900))
    shot = tmp_path / "report.png"
    loaded.page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000


def test_comparison_page_labels_runs_by_directory(runs, open_page):
    facts = assert_readable(open_page(runs / "cmp.html"))
    assert "prose_run" in facts["title"] and "random_run" in facts["title"]
    first_column = [facts["cells"][i] for i in (0, 11)]
    assert first_column == [str(runs / "prose_run"), str(runs / "random_run")]
    for index, name in enumerate(("prose_run", "random_run")):
        heads = pd.read_parquet(runs / name / "heads.parquet")
        assert facts["cells"][11 * index + 6] == f"{heads['sink_score'].mean():.3f}"
    assert "builtin:random" in facts["text"]


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
