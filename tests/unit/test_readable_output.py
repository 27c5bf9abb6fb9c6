"""What users read: --help and docs name no internal spec, every report figure labels its axes and says which
model, corpus and T it shows, legends never repeat a colour, and matplotlib's warnings stay out of the terminal."""

import re
import warnings
from pathlib import Path

import matplotlib.colors
import numpy as np
import pandas as pd
import pytest

from sinkscope.cli.main import SUBCOMMANDS, build_parser
from sinkscope.report import compare, plots

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_help_of_every_command_names_no_spec(capsys):
    parser = build_parser()
    for name in ("", *(s.replace("_", "-") for s in SUBCOMMANDS)):
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--help"] if name else ["--help"])
        text = capsys.readouterr().out
        assert "SPEC" not in text, f"sinkscope {name} --help: {re.findall(r'.*SPEC.*', text)}"


def test_docs_name_no_spec_and_their_links_resolve():
    for page in [*DOCS.glob("*.md"), *DOCS.glob("theory/*.md")]:
        text = page.read_text()
        assert "SPEC" not in text, page
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", text):
            assert (page.parent / target).is_file(), f"{page.name} links to missing {target}"


def tiny_tables(n_layers: int = 3, n_heads: int = 4, T: int = 8):
    rng = np.random.default_rng(0)
    heads = pd.DataFrame([{"layer": l, "head": h, "sink_score": rng.random(), "diag_score": rng.random(),
                           "head_class": ["sink", "dense", "mixed"][h % 3]}
                          for l in range(n_layers) for h in range(n_heads)])  # fmt: skip
    layers = pd.DataFrame({"layer": range(n_layers), "sink_rate": rng.random(n_layers)})
    for kind in "hz":
        layers[f"bos_cos_mean_{kind}"] = rng.uniform(-1, 1, n_layers)
        layers[f"bos_cos_max_{kind}"] = rng.uniform(0, 1, n_layers)
        layers[f"bos_norm_ratio_{kind}"] = rng.uniform(1, 50, n_layers)
    positions = pd.DataFrame({"layer": np.repeat(range(n_layers), T), "position": np.tile(range(T), n_layers),
                              "sink_rate": rng.random(n_layers * T), "mean_key_score": rng.random(n_layers * T)})
    return heads, layers, positions


def figures():
    heads, layers, positions = tiny_tables()
    return {
        "sink heatmap": plots.head_heatmap(heads, "sink_score", "sink score"),
        "bos geometry": plots.bos_geometry(layers),
        "position sinks": plots.position_sinks(positions),
        "head classes": plots.head_classes(heads),
        "compare": compare.depth_figure([(f"run {i}", layers, heads) for i in range(3)]),
    }


def test_every_axis_and_colorbar_of_the_report_figures_is_labelled():
    for name, fig in figures().items():
        for ax in fig.axes:
            assert ax.get_ylabel(), f"{name}: an axis (or colorbar) without a label"


def test_figures_say_model_corpus_and_T():
    fig = plots.head_heatmap(tiny_tables()[0], "sink_score", "sink score")
    with plots.labelled("tiny-llama · corpus.txt · T=8"):
        png = plots.figure_png(fig)
    assert png.startswith(b"\x89PNG")
    assert "tiny-llama · corpus.txt · T=8" in [t.get_text() for t in fig.texts]


def test_a_legend_of_many_runs_repeats_no_colour():
    heads, layers, _ = tiny_tables()
    for n in (10, 12, 25):
        fig = compare.depth_figure([(f"run {i}", layers, heads) for i in range(n)])
        styles = {(matplotlib.colors.to_hex(line.get_color()), line.get_linestyle()) for line in fig.axes[0].lines
                  if line.get_label().startswith("run")}  # fmt: skip
        assert len(styles) == n


def test_matplotlib_warnings_do_not_leak(capfd):
    fig = plots.head_heatmap(tiny_tables()[0], "sink_score", "注意 sink 汇")  # CJK glyphs the font may lack
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plots.figure_png(fig)
    assert not caught
    assert not capfd.readouterr().err
