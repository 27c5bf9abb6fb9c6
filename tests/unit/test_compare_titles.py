"""The comparison page's per-head difference panels name the pair of runs in their titles: read back from the
rendered figure (Agg renderer bounding boxes), the two titles never overlap and stay inside the figure, however long
the run names and however narrow the panels; the caption keeps the full names."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sinkscope.report import compare
from sinkscope.report.plots import no_mathtext

LONG = "runs/smollm2-135m/builtin_prose_T64_eps0.3_max-windows-256_geometry-cap-256_seed0"
PAIRS = {
    "short": ("a", "b"),
    "long paths": (LONG, LONG.replace("prose", "random")),
    "widest glyphs": ("W" * 150, "M" * 150),
    "no break points": ("x" * 40 + "/" + "y" * 40, "z" * 81),
}


def heads(layers: int, n_heads: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"layer": l, "head": h, "sink_score": rng.random(), "diag_score": rng.random()}
                         for l in range(layers) for h in range(n_heads)])  # fmt: skip


@pytest.mark.parametrize("n_heads", [1, 9])
@pytest.mark.parametrize("pair", PAIRS, ids=list(PAIRS))
def test_rendered_titles_never_overlap_and_stay_in_the_figure(pair, n_heads):
    first, second = PAIRS[pair]
    title = f"{second} − {first}"
    with no_mathtext():
        fig = compare.difference_figure(heads(3, n_heads, 0), heads(3, n_heads, 1), title)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
    renderer = canvas.get_renderer()
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split("\n")[0] for ax in titled] == ["Δ sink score", "Δ diagonal score"]
    left, right = (ax.title.get_window_extent(renderer) for ax in titled)
    assert left.x1 < right.x0, (pair, n_heads, left, right)  # side by side, a gap between them
    for box in (left, right):
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (pair, n_heads, box, fig.bbox.width)
    for ax in titled:
        lines = ax.get_title().split("\n")[1:]
        assert 1 <= len(lines) <= 2, lines
        shown = "".join(lines)
        assert shown == title or ("…" in shown and title.startswith(shown.split("…")[0]) and
                                  title.endswith(shown.split("…")[1])), shown  # fmt: skip


def test_a_name_that_fits_is_shown_whole_on_one_line():
    assert compare.fit_name("a − b", width=200) == "a − b"


def test_the_caption_keeps_the_full_names():
    first, second = PAIRS["long paths"]

    class Run:  # the three things difference_figures reads of a run
        def __init__(self, table):
            self.heads, self.layers = table, pd.DataFrame({"layer": range(3)})
            self.meta = {"model": {"name": "tiny", "sha256": "0" * 64}}

    with no_mathtext():
        figures = compare.difference_figures([Run(heads(3, 2, 0)), Run(heads(3, 2, 1))], [first, second])
    assert len(figures) == 1 and f"{second} − {first}" in figures[0]["caption"]
