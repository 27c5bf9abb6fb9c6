"""`sinkscope attribute` refuses bad thresholds in one line before loading a model; the model-level route shares
and the figure come from the per-head table's counts."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from sinkscope.cli.main import build_parser
from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.switch_attribution import route_totals
from sinkscope.report.attribution_section import ROUTE_COLORS, attribution_figure


def table() -> pd.DataFrame:
    return pd.DataFrame({
        "layer": [0, 0, 1], "head": [0, 1, 0], "n_queries": [100, 100, 100], "n_off": [30, 0, 20],
        "off_frac": [0.3, 0.0, 0.2], "n_bos_sink": [20, 0, 5], "n_cancellation": [10, 0, 15],
        "share_bos_sink": [2 / 3, math.nan, 0.25], "share_cancellation": [1 / 3, math.nan, 0.75], "unexplained": [0, 0, 0],
    })  # fmt: skip


def test_route_totals_pool_the_counts():
    totals = route_totals(table())
    assert totals["n_off"] == 50 and totals["off_frac"] == 50 / 300
    assert totals["shares"] == {"bos_sink": 25 / 50, "cancellation": 25 / 50}


def test_figure_has_both_panels():
    fig = attribution_figure(table())
    left, right = fig.axes[:2]
    assert [p.get_height() for p in left.patches[:2]] == [pytest.approx(2 / 3), pytest.approx(0.25)]
    sink, cancel, grey = (list(to_rgb(c)) for c in (ROUTE_COLORS["bos_sink"], ROUTE_COLORS["cancellation"], "#eeeeee"))
    assert right.images[0].get_array().tolist() == [[sink, grey], [cancel, grey]]  # grey: too few off, or no head


def test_bad_threshold_is_one_line(tmp_path):
    args = build_parser().parse_args(["attribute", "--tau", "2", "--out", str(tmp_path / "x")])
    with pytest.raises(SinkscopeError, match="--tau 2.0"):
        args.func(args)
    assert not (tmp_path / "x").exists()
