"""The δ and τ scales a switch claim reads its counted tables at (`switch_claims.grid_index`): the sensitivity's
× ½ and × 2 pick the tables counted at those scales, and a scale off the grid is an error, not a NaN verdict."""

from __future__ import annotations

import numpy as np
import pytest

from sinkscope.reproduction.switch_claims import GRID, grid_index, switch_routes_verdict, value_drain_verdict
from sinkscope.reproduction.verdicts import NOT_SUPPORTED, PARTLY, SUPPORTED

W, QUERIES = 8, 10
DRAINS = np.tile([0.1, 0.2, 0.6, 0.9], (W, 1, 1))  # (W, L = 1, KV = 4); one query head per group


def test_grid_index_finds_each_counted_scale_and_refuses_any_other() -> None:
    assert [grid_index(s) for s in (0.5, 1.0, 2.0)] == [0, 1, 2]
    assert grid_index(0.05 / 0.1) == 0 and grid_index(0.30000000000000004 / 0.15) == 2
    assert grid_index(1.0, (1.0,)) == 0
    for off in (0.25, 4.0, 1.01):
        with pytest.raises(ValueError):
            grid_index(off)
    with pytest.raises(ValueError):
        grid_index(0.5, (1.0,))


def test_value_drain_sensitivity_reads_the_table_counted_at_half_and_double_delta() -> None:
    """Hard-sink counts per head (of 10 queries) at δ × ½, × 1, × 2: [1, 2, 8, 9], [9, 8, 2, 1], [9, 9, 9, 1].
    Drains rise 0.1 → 0.9, so by hand ρ = +1 at δ × ½ (not supported), −1 at δ × 1 and −√0.6 ≈ −0.775 at δ × 2
    (supported: sink groups' median drain 0.15 and 0.2 ≤ 0.5)."""
    hard = np.zeros((W, len(GRID), 1, 4))
    hard[:, 0, 0], hard[:, 1, 0], hard[:, 2, 0] = [1, 2, 8, 9], [9, 8, 2, 1], [9, 9, 9, 1]
    verdict = value_drain_verdict("m", DRAINS, hard, QUERIES, delta=0.1)
    assert verdict.evidence["rho_all_groups"] == pytest.approx(-1.0)
    by_scale = {r["scale"]: r["verdict"] for r in verdict.sensitivity if r["threshold"] == "delta"}
    assert by_scale == {0.5: NOT_SUPPORTED, 2.0: SUPPORTED}


def test_value_drain_with_one_counted_delta_reads_it_and_does_not_vary_delta() -> None:
    hard = np.tile([9.0, 8.0, 2.0, 1.0], (W, 1, 1))  # (W, L, H): δ × 1 only
    verdict = value_drain_verdict("m", DRAINS, hard, QUERIES, delta=0.1)
    assert verdict.evidence["rho_all_groups"] == pytest.approx(-1.0)
    assert [r["verdict"] for r in verdict.sensitivity if r["threshold"] == "delta"] == [None, None]


def test_switch_routes_sensitivity_reads_delta_on_the_second_axis_and_tau_on_the_third() -> None:
    """Route counts (W, δ scale, τ scale, [bos_sink, other, unexplained]); the share of switched-off queries on a
    non-BOS route by hand: 0 at δ, τ × 1 (supported), 0.5 at δ × ½ (partly), 0 at δ × 2, 1 at τ × ½ (not
    supported), 0.3 at τ × 2 (partly); every other cell 2/3."""
    counts = np.tile(np.array([1.0, 1.0, 1.0]), (W, 3, 3, 1))
    for (i, j), cell in {(1, 1): [10, 0, 0], (0, 1): [5, 5, 0], (2, 1): [10, 0, 0], (1, 0): [0, 10, 0],
                         (1, 2): [7, 2, 1]}.items():  # fmt: skip
        counts[:, i, j] = cell
    verdict = switch_routes_verdict("m", counts, ["bos_sink", "other"], [True, False], tau=0.1, delta=0.1)
    assert verdict.evidence["non_bos_route_frac"] == 0.0
    by = {(r["threshold"], r["scale"]): r["verdict"] for r in verdict.sensitivity if r["threshold"] in ("delta", "tau")}
    assert by == {("delta", 0.5): PARTLY, ("delta", 2.0): SUPPORTED, ("tau", 0.5): NOT_SUPPORTED, ("tau", 2.0): PARTLY}
