"""Ranges cut by hand: the range of context lengths T_min … T_max a cost claim reads (both ends included), the
layers it solved (all of them, or every stride-th), the count of full KV heads a share gives, the ranking of heads
by need with its ties, and the plan values that put full heads in (0.5, 1] and streaming ones in [0, 0.5).

Each test names in its docstring the one-line bug it was seen to fail on."""

import numpy as np
import pandas as pd
import pytest

from sinkscope.pipelines.kv_plan import full_heads, need_order, plan_values
from sinkscope.reproduction.cost_claims import cost_real_verdict

# 8 windows (the fewest a verdict needs) × T = 8, 16, 32: the sink is cheaper in every layer at T = 8, in half of
# them at T = 16 and in a quarter at T = 32 (every window alike).
WINS = np.tile([1.0, 0.5, 0.25], (8, 1))


def test_the_cost_claim_reads_both_ends_of_its_range_of_context_lengths():
    """Mean over T = 8, 16, 32 of the shares: (1 + 0.5 + 0.25) / 3 = 0.5833, worst 0.25; each T's share recorded.
    Killed by `Ts >= th["T_min"]` → `Ts > th["T_min"]` (T = 8 left out: 0.375) and by `Ts <= th["T_max"]` →
    `Ts < th["T_max"]` (T = 32 left out: 0.75)."""
    verdict = cost_real_verdict("m", WINS, [8, 16, 32], layers=[0, 3], depth=6)
    assert verdict.evidence["sink_cheaper_frac"] == pytest.approx(1.75 / 3)
    assert verdict.evidence["worst_T_frac"] == 0.25
    assert [verdict.evidence[f"sink_cheaper_frac_T{T}"] for T in (8, 16, 32)] == [1.0, 0.5, 0.25]
    assert verdict.thresholds["T_min"] == 8.0 and verdict.thresholds["T_max"] == 32.0


def test_the_layer_stride_is_recorded_only_when_some_layers_were_not_solved():
    """Layers 0, 3 of 6: every 3rd; layer 0 of 6 alone: the stride is the depth; all 6 of 6 solved: nothing fixed
    about layers. Killed by `len(layers) < depth` → `len(layers) <= depth` and by `if len(layers) > 1 else depth` →
    `if len(layers) > 0 else depth` (one layer: an IndexError)."""
    def reason(layers):
        records = cost_real_verdict("m", WINS, [8, 16, 32], layers=layers, depth=6).sensitivity
        return [r["not_varied"] for r in records if r["threshold"] == "layer_stride"]

    assert len(reason([0, 3])) == 1 and reason([0, 3])[0].startswith("layers 0, 3 of 6 were solved (one in 3)")
    assert reason([0])[0].startswith("layers 0 of 6 were solved (one in 6)")
    assert reason(list(range(6))) == []


@pytest.mark.parametrize("share, full", [
    (0.0, []), (1.0, [0, 1, 2, 3, 4, 5]),
    (0.25, [5, 0]),  # 0.25 · 6 = 1.5 → 2 heads (round half to even: 2)
    (0.5, [5, 0, 3]),  # 3 heads
    (0.4, [5, 0]),  # 2.4 → 2
    (0.45, [5, 0, 3]),  # 2.7 → 3
])  # fmt: skip
def test_full_heads_are_the_first_round_share_times_n_of_the_order_laid_out_layer_major(share, full):
    """L = 2 layers × KV = 3 heads, flat index = 3·layer + kv_head; need order 5, 0, 3, 1, 4, 2. Killed by
    `order[: round(share * n_layers * n_kv)]` → `order[: int(share * n_layers * n_kv)]` (1.5 → 1, 2.7 → 2) and
    by `full.reshape(n_layers, n_kv)` → `full.reshape(n_kv, n_layers).T`."""
    got = full_heads(np.array([5, 0, 3, 1, 4, 2]), 2, 3, share)
    expected = np.zeros((2, 3), dtype=bool)
    for flat in full:
        expected[flat // 3, flat % 3] = True
    assert got.tolist() == expected.tolist()


def test_plan_values_rank_full_heads_above_one_half_and_streaming_ones_below():
    """Order 2, 0, 1, 3 with heads 2 and 0 full: full ranks 0.5 + 0.5·(2 − r)/2 → 1.0, 0.75; streaming ranks
    0.5·(2 − r)/3 → 1/3, 1/6 (never 0.5 itself, which DuoAttention's threshold would misread). Killed by
    `(len(ranked) + (0 if keep else 1))` → `(len(ranked) + (0 if keep else 0))` (a streaming head at 0.5)."""
    order = np.array([2, 0, 1, 3])
    values = plan_values(order, np.array([[True, False], [True, False]]))
    assert values.ravel().tolist() == pytest.approx([0.75, 1 / 3, 1.0, 1 / 6])


def test_need_order_breaks_ties_by_entropy_then_layer_then_kv_head():
    """Needs 0.4, 0.4, 0.4, 0.9, 0.4: the 0.9 first; among the ties the higher entropy (0.8) first, then entropy
    0.5 by (layer, kv_head): (0, 1) before (1, 0) before (1, 1). Killed by `-scores["entropy"]` →
    `scores["entropy"]` and by `(scores["kv_head"], scores["layer"], …` → `(scores["layer"], scores["kv_head"], …`."""
    scores = pd.DataFrame({"layer": [1, 0, 1, 0, 2], "kv_head": [1, 1, 0, 0, 0],
                           "need": [0.4, 0.4, 0.4, 0.9, 0.4], "entropy": [0.5, 0.5, 0.5, 0.1, 0.8]})  # fmt: skip
    assert need_order(scores).tolist() == [3, 4, 1, 2, 0]


@pytest.mark.parametrize("fraction, count", [(1.0, 6), (0.25, 2), (0.5, 3), (0.05, 1), (0.0001, 1)])
def test_head_count_of_a_fraction_is_rounded_and_at_least_one(fraction, count):
    """6 heads: all at fraction 1 (the top of (0, 1]), round(1.5) = 2, 3, and at least 1 where 6·fraction rounds to
    0. Killed by `not 0 < fraction <= 1` → `not 0 < fraction < 1` and by `max(1, …)` → `max(0, …)`."""
    from sinkscope.pipelines.head_selection import count_for_fraction

    assert count_for_fraction(6, fraction) == count


@pytest.mark.parametrize("fraction", [0.0, 1.0000001, -0.5])
def test_head_count_refuses_a_fraction_outside_zero_to_one(fraction):
    """Killed by `not 0 < fraction <= 1` → `not 0 <= fraction <= 1` (0 accepted, counted as 1 head)."""
    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines.head_selection import count_for_fraction

    with pytest.raises(SinkscopeError, match="must be in \\(0, 1\\]"):
        count_for_fraction(6, fraction)


@pytest.mark.parametrize("T, rank, p_h1, winner", [
    (2, 1, 1 / 2, "undecided"),  # 2^-1 · C(1, 0): P(H1) exactly ½ is not below it
    (4, 2, 1 / 2, "undecided"),  # 2^-3 · (1 + 3)
    (5, 2, 5 / 16, "diagonal"),  # 2^-4 · (1 + 4)
    (3, 1, 1 / 4, "diagonal"),
    (3, 4, 1.0, "sink"),  # r = T + 1
    (3, 3, 1.0, "undecided"),  # r = T: P(H1) = 1, but r < T + 1
])  # fmt: skip
def test_predicted_winner_at_p_one_half_and_at_rank_t_plus_one(T, rank, p_h1, winner):
    """Wendel's P(H1) = 2^-(T−1) Σ_{k<min(r,T)} C(T−1, k) by hand; "diagonal" below ½, "sink" from r = T + 1. Killed
    by `wendel_probability(T, rank) < 0.5` → `<= 0.5`, by `rank >= T + 1` → `rank > T + 1` and by
    `range(min(d, T))` → `range(min(d, T) + 1)`."""
    from sinkscope.theory.cost_closed_forms import predicted_winner, wendel_probability

    assert wendel_probability(T, rank) == p_h1
    assert predicted_winner(T, rank) == winner
