"""The comparison's bootstrap intervals and sample note (`report/compare.py`), on hand-made per-window values.

Checks against independent numbers: on many windows the percentile interval of a difference of means matches the
normal-theory interval 1.96·√(s²_a/n_a + s²_b/n_b) (paired: 1.96·s_d/√n); identical paired windows give a
zero-width interval; a run without per-window values gets no interval; the sample note names what differs.
"""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from sinkscope.report.compare import NO_INTERVAL, delta_cell, delta_interval, sample_note


def run(values: np.ndarray | None, windows: int, seq_len: int = 64, hashes=None) -> SimpleNamespace:
    extra = {}
    if values is not None:
        extra["windows"] = pd.DataFrame({"window": np.arange(len(values)), "sink_rate": values,
                                         "tokens_hash": np.arange(len(values)) if hashes is None else hashes})  # fmt: skip
    return SimpleNamespace(meta={"summary": {"sink_rate": float(np.mean(values)) if values is not None else 0.5},
                                 "corpus": {"windows": windows, "seq_len": seq_len}}, extra=extra)  # fmt: skip


def test_independent_interval_matches_normal_theory_on_many_windows():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.3, 0.1, 4000), rng.normal(0.35, 0.2, 1000)
    low, high = delta_interval(a, b, paired=False)
    half = 1.96 * np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    centre = b.mean() - a.mean()
    assert low == pytest.approx(centre - half, abs=0.1 * half) and high == pytest.approx(centre + half, abs=0.1 * half)


def test_paired_interval_uses_the_per_window_differences():
    rng = np.random.default_rng(2)
    a = rng.normal(0.3, 0.3, 2000)
    b = a + rng.normal(0.01, 0.01, 2000)  # strongly correlated: the paired interval is much narrower
    low, high = delta_interval(a, b, paired=True)
    half = 1.96 * (b - a).std(ddof=1) / np.sqrt(len(a))
    assert (high - low) / 2 == pytest.approx(half, rel=0.1)
    assert (high - low) < 0.2 * np.diff(delta_interval(a, b, paired=False))[0]
    assert delta_interval(a, a.copy(), paired=True) == (0.0, 0.0)


def test_delta_cells_pair_only_the_same_windows_and_say_when_data_is_missing():
    values = np.linspace(0, 1, 50)
    first = run(values, 50)
    same = delta_cell([first, run(values + 0.1, 50)], 1, "sink_rate", "sink_rate")
    assert same["value"] == "+0.100" and same["interval"] == "[+0.100,\u00a0+0.100]" and "paired" in same["title"]
    other = delta_cell([first, run(values + 0.1, 50, hashes=np.arange(50) + 7)], 1, "sink_rate", "sink_rate")
    assert "on their own" in other["title"] and other["interval"] != same["interval"]
    old = delta_cell([first, run(None, 50)], 1, "sink_rate", "sink_rate")
    assert old["interval"] == NO_INTERVAL == "no interval: per-window data not stored"
    assert delta_cell([first, run(values, 50)], 0, "sink_rate", "sink_rate") == "–"


def test_sample_note_names_differences_in_windows_and_t():
    runs = [run(None, 256, 64), run(None, 4, 64), run(None, 256, 128)]
    note = sample_note(runs, ["a", "b", "c"])
    assert "differ in windows (a 256, b 4, c 256)" in note and "differ in T (a T = 64, b T = 64, c T = 128)" in note
    assert sample_note(runs[:1] * 2, ["a", "b"]) == ""
