"""Gaps of issue 34 in `pipelines.analysis` (mutmut survivors): the head-class thresholds of `AnalyzeConfig` reach
the heads table (each head's class recomputed here from its own scores by the rule of docs/statistics.md), and
`statistics_for` adds the smoothing curves only when asked."""

import pytest

from sinkscope.corpus.windows import TokenWindows
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze, statistics_for

from .test_capture_families import build, token_windows


def rule(row, eps: float, diagonal: float, previous: float, dense: float) -> str:
    """The class by the documented order: sink, diagonal, previous-token, dense, else mixed (strict >)."""
    for name, value, threshold in (("sink", row.sink_score, eps), ("diagonal", row.diag_score, diagonal),
                                   ("previous-token", row.prev_score, previous), ("dense", row.entropy, dense)):
        if value > threshold:
            return name
    return "mixed"


def test_the_configured_head_class_thresholds_reach_the_heads_table():
    lm = build("llama")
    config = AnalyzeConfig(epsilon=0.6, diagonal=0.2, previous=0.15, dense=0.95, geometry_cap=0)
    heads = analyze(lm, TokenWindows(token_windows(4), batch_size=2), config, progress=False).heads
    expected = [rule(row, 0.6, 0.2, 0.15, 0.95) for row in heads.itertuples()]
    assert list(heads["head_class"]) == expected
    defaults = [rule(row, 0.6, 0.5, 0.5, 0.7) for row in heads.itertuples()]
    assert expected != defaults  # the thresholds change some class


@pytest.mark.parametrize(("smoothing", "expected"), [(None, False), (False, False), (True, True), ([1], True)])
def test_smoothing_curves_only_when_asked(smoothing, expected):
    lm = build("llama")
    kwargs = {} if smoothing is None else {"smoothing": smoothing}
    names = [s.name for s in statistics_for(lm, 12, AnalyzeConfig(geometry_cap=0), **kwargs)]
    assert ("smoothing" in names) == expected, names
