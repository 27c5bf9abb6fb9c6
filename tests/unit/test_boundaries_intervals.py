"""Decisions read off an interval or a cut, where the interval's two ends disagree or a value sits exactly on the
cut: the dense experiment's significant heads, `kv-plan eval`'s comparison with random plans, the eviction summary's
share of kept sets holding BOS, the cost regimes' tie, the categories of switched-off queries.

Expected values are worked out by hand in the comments. Each test names in its docstring the one-line bug it was
seen to fail on."""

import math

import pandas as pd
import pytest

import sinkscope.pipelines.dense_attention as dense
from sinkscope.pipelines.cost_regimes import winner
from sinkscope.pipelines.eviction import summarize as evict_summary
from sinkscope.pipelines.kv_plan_eval import summarize as plan_summary
from sinkscope.pipelines.switch_assumptions import categorize


def test_dense_regime_counts_count_an_interval_only_when_both_ends_agree(monkeypatch):
    """Per regime: heads whose Δcos interval lies above 0 (`significantly_more`) or below 0 (`significantly_less`);
    an interval that reaches 0 at an end, or straddles it, is neither. Head 0 counts, the layer rows (head −1)
    do not. Killed by `group["dcos_lo"] > 0` → `>= 0`, `group["dcos_hi"] < 0` → `<= 0`, `group["dcos_hi"] < 0` →
    `group["dcos_lo"] < 0`, and `heads["head"] >= 0` → `heads["head"] > 0`."""
    monkeypatch.setattr(dense, "REGIMES", ("a", "b"))
    heads = pd.DataFrame([  # head, regime, dcos, dcos_lo, dcos_hi
        (0, "a", 0.2, 0.1, 0.3),  # above 0: more, significantly more
        (1, "a", 0.2, -0.1, 0.5),  # ends disagree: more, not significant
        (2, "a", 0.1, 0.0, 0.2),  # lower end exactly 0: more, not significant
        (3, "b", -0.2, -0.3, -0.1),  # below 0: significantly less
        (4, "b", -0.1, -0.2, 0.0),  # upper end exactly 0: not significant
        (5, "b", -0.2, -0.5, 0.1),  # ends disagree
        (-1, "a", 0.3, 0.2, 0.4),  # a layer row: not a head
    ], columns=["head", "regime", "dcos", "dcos_lo", "dcos_hi"])  # fmt: skip
    counts = dense.regime_counts(heads).set_index("regime")
    assert counts.loc["a"].tolist() == [3, 0.5, 3, 1, 0]  # heads, share of 6, dcos > 0, lo > 0, hi < 0
    assert counts.loc["b"].tolist() == [3, 0.5, 0, 0, 1]


def _plan_rows() -> pd.DataFrame:
    """`kv-plan eval` rows by hand: 2 windows; `full` loses 1.0 on each; 4 random draws at n_full = 1 with mean
    losses 1, 2, 2, 3; `sinkscope` at n_full = 1 with losses 1.5 and 2.5 (mean 2)."""
    rows = [("full", 0, 4, 0, 1.0), ("full", 0, 4, 1, 1.0)]
    for draw, losses in enumerate([(1.0, 1.0), (2.0, 2.0), (1.5, 2.5), (3.0, 3.0)]):
        rows += [("random", draw, 1, window, loss) for window, loss in enumerate(losses)]
    rows += [("sinkscope", 0, 1, 0, 1.5), ("sinkscope", 0, 1, 1, 2.5)]
    frame = pd.DataFrame(rows, columns=["policy", "draw", "n_full", "window", "loss"])
    return frame.assign(share=frame["n_full"] / 4, memory=0.5, accuracy=0.5)


def test_beats_random_counts_only_draws_strictly_worse_and_the_draws_band_is_their_percentiles():
    """`sinkscope`'s mean loss 2.0 ties two draws (2.0, 2.0), beats one (3.0), loses to one (1.0): beats_random =
    1/4. Its Δ against full per window is (0.5, 1.5): mean 1, half width 1.96 · 0.7071 / √2 = 0.98. The random
    draws' Δ are (0, 1, 1, 2): 2.5 % and 97.5 % percentiles by linear interpolation at 0.075 and 2.925 of the
    sorted draws: 0.075 and 1.925. Killed by `random.loc[n] > loss` → `random.loc[n] >= loss`."""
    table = plan_summary(_plan_rows()).set_index("policy")
    assert table.loc["sinkscope", "beats_random"] == 0.25
    assert math.isnan(table.loc["random", "beats_random"]) and math.isnan(table.loc["full", "beats_random"])
    assert table.loc["sinkscope", "delta_full"] == pytest.approx(1.0)
    assert table.loc["sinkscope", "delta_lo"] == pytest.approx(1.0 - 1.959963984540054 * 0.5)
    assert table.loc["sinkscope", "delta_hi"] == pytest.approx(1.0 + 1.959963984540054 * 0.5)
    assert (table.loc["random", "delta_lo"], table.loc["random", "delta_hi"]) == pytest.approx((0.075, 1.925))
    assert table.loc["random", "draws"] == 4 and table.loc["random", "delta_full"] == pytest.approx(1.0)


def test_eviction_summary_reads_kept_positions_not_digits():
    """Top-mass kept sets "0,3" and "10,2" over two windows: only the first holds BOS (position 0; "10" holds the
    digit 0, not the position): bos_kept_frac 1/2; `recent` keeps nothing (0). Killed by
    `.str.split(",").apply(lambda s: "0" in s)` → `.apply(lambda s: "0" in s)`."""
    losses = pd.DataFrame([  # window, policy, k, kept, loss
        (0, "full", 0, "", 1.0), (1, "full", 0, "", 2.0),
        (0, "recent", 0, "", 1.5), (1, "recent", 0, "", 2.5),
        (0, "top-mass", 2, "0,3", 1.25), (1, "top-mass", 2, "10,2", 2.0),
    ], columns=["window", "policy", "k", "kept", "loss"])  # fmt: skip
    table = evict_summary(losses).set_index(["policy", "k"])
    assert table.loc[("top-mass", 2), "bos_kept_frac"] == 0.5
    assert table.loc[("recent", 0), "bos_kept_frac"] == 0.0 and table.loc[("full", 0), "bos_kept_frac"] == 1.0
    assert table.loc[("top-mass", 2), "delta_full"] == pytest.approx(0.125)  # (0.25 + 0.0) / 2
    assert table.loc[("top-mass", 2), "delta_recent"] == pytest.approx(-0.375)  # (−0.25 − 0.5) / 2


@pytest.mark.parametrize("sink, diagonal, rtol, expected", [
    (1.0, 2.0, 0.5, "tie"),  # |1 − 2| = 1 = 0.5 · max(1, 2): equality is a tie
    (1.0, 2.0, 0.25, "sink"),  # 1 > 0.25 · 2
    (2.0, 1.0, 0.25, "diagonal"),
    (1.0, 2.0, 0.75, "tie"),  # 1 ≤ 0.75 · max = 1.5, though 1 > 0.75 · min = 0.75
])  # fmt: skip
def test_cost_winner_tie_at_exactly_rtol_of_the_larger_cost(sink, diagonal, rtol, expected):
    """Killed by `abs(sink - diagonal) <= rtol * max(...)` → `<`, and by `max(abs(sink), abs(diagonal))` →
    `min(...)`."""
    assert winner(sink, diagonal, rtol) == expected


@pytest.mark.parametrize("a0, a_self, top, expected", [
    (0.5, 0.5, 0.5, "near sink"),  # each cut at 0.5 counts; BOS first
    (0.49, 0.5, 0.5, "self, small value"),
    (0.49, 0.49, 0.5, "other small-value key"),
    (0.49, 0.49, 0.49, "spread"),
])  # fmt: skip
def test_switched_off_categories_at_their_half_cuts(a0, a_self, top, expected):
    """Killed by `a0 >= 0.5` → `a0 > 0.5`, `a_self >= 0.5` → `a_self > 0.5` and `top_mass >= 0.5` →
    `top_mass > 0.5`."""
    assert categorize(a0, a_self, top) == expected



def test_emergence_needs_a_score_strictly_above_its_threshold():
    """Steps 0, 10, 20, 30 (given out of order). Head (0, 0): sink 0.3, 0.5, 0.3, 0.31 at ε = 0.3 — a score equal to ε
    is not above it, so the sink emerges at 30; head (0, 1): 0.31 … 0.3 ends at ε: no row; head (0, 2): diagonal
    0.5, 0.51, 0.6, 0.7 at 0.5 emerges at 10; head (0, 3): sink from the first step. Killed by
    `part[column] > thresholds[field]` → `part[column] >= thresholds[field]` and by dropping `.sort_values("step")`."""
    from sinkscope.pipelines.trajectory import emergence

    scores = {0: ([0.3, 0.5, 0.3, 0.31], [0.0] * 4), 1: ([0.31, 0.4, 0.5, 0.3], [0.0] * 4),
              2: ([0.0] * 4, [0.5, 0.51, 0.6, 0.7]), 3: ([0.4, 0.35, 0.32, 0.9], [0.1] * 4)}  # fmt: skip
    table = pd.DataFrame([{"step": step, "layer": 0, "head": head, "sink_score": sink[i], "diag_score": diag[i]}
                          for head, (sink, diag) in scores.items()
                          for i, step in reversed(list(enumerate([0, 10, 20, 30])))])  # fmt: skip
    dated = emergence(table, epsilon=0.3, diagonal=0.5).set_index(["head", "pattern"])
    assert dated["emergence_step"].to_dict() == {(0, "sink"): 30, (2, "diagonal"): 10, (3, "sink"): 0}
    assert dated["from_first"].to_dict() == {(0, "sink"): False, (2, "diagonal"): False, (3, "sink"): True}
    assert dated["final_score"].to_dict() == pytest.approx({(0, "sink"): 0.31, (2, "diagonal"): 0.7,
                                                            (3, "sink"): 0.9})  # fmt: skip


@pytest.mark.parametrize("b, c, regime", [
    (0.0, 2.0, "monotone"),  # b = 0: d cos/dλ = (1 − λ) c ≥ 0 all the way
    (-0.5, 2.0, "peak, dense more"),  # −c/2 < b < 0
    (-1.0, 2.0, "peak, dense less"),  # b = −c/2: dense exactly as smooth as the identity, not more
    (-1.5, 2.0, "peak, dense less"),
    (-2.0, 2.0, "resists"),  # b = −c: λ* = 1 + b/c = 0
    (0.0, 0.0, "monotone"),  # c = 0 is a trace of a semi-definite form
    (-1.0, 0.0, "resists"),
])  # fmt: skip
def test_smoothing_regime_at_each_end_of_its_intervals(b, c, regime):
    """The regimes cut b at −c, −c/2 and 0 (closed as in the theory: b ≥ 0, b ≤ −c, 2b + c > 0). Killed by
    `b >= 0` → `b > 0`, `b <= -c` → `b < -c`, `2 * b + c > 0` → `2 * b + c >= 0` and `c < 0` → `c <= 0`."""
    from sinkscope.theory.smoothing_regimes import smoothing_regime

    assert smoothing_regime(b, c) == regime
