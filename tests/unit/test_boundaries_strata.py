"""Strata cut by hand: which layers a within-layer comparison uses (only those holding both classes), the
within-layer permutation test counted over all 9 relabellings of a small case, bootstrap resamples that stay in
their stratum, and crossed resamples over windows × draws of different lengths.

Each test names in its docstring the one-line bug it was seen to fail on."""

import math

import numpy as np
import pytest

from sinkscope.reproduction.strata import stratified_difference, within_layer_permutation_p
from sinkscope.reproduction.verdicts import resamples, stratified_indices

# Layer 0: sink (3) against others (1, 2); layer 1: sinks (5, 7) against other (4); layer 2: sinks only; layer 3:
# others only. Layers 2 and 3 hold one class each and must not enter a within-layer comparison.
VALUES = np.array([3.0, 1.0, 2.0, 5.0, 7.0, 4.0, 100.0, 200.0, -50.0, -60.0])
IS_SINK = np.array([1, 0, 0, 1, 1, 0, 1, 1, 0, 0], dtype=bool)
LAYERS = np.array([0, 0, 0, 1, 1, 1, 2, 2, 3, 3])


def test_stratified_difference_uses_only_layers_holding_both_classes():
    """Layer 0: 3 − 1.5 = 1.5 with weight 1·2/3; layer 1: 6 − 4 = 2 with weight 2·1/3; difference (1.5 + 2) / 2 =
    1.75. Within-class squares: 0.5 (layer 0's others) + 2 (layer 1's sinks) over 1 + 1 degrees of freedom: sd
    √1.25. Killed by `0 < is_sink[...].sum() < ...` → `0 <= is_sink[...].sum() < ...` (layer 3 enters),
    by `... .sum() < (layers == layer).sum()` → `<=` (layer 2 enters), and by `w = a.size * b.size / (a.size +
    b.size)` → `w = a.size / (a.size + b.size)`."""
    difference, standardised, used = stratified_difference(VALUES, IS_SINK, LAYERS)
    assert used == 2
    assert difference == pytest.approx(1.75, abs=1e-12)
    assert standardised == pytest.approx(1.75 / math.sqrt(1.25), abs=1e-12)
    assert stratified_difference(VALUES[6:], IS_SINK[6:], LAYERS[6:])[2] == 0  # one class per layer: nothing used


def test_within_layer_permutation_p_of_the_largest_of_nine_relabellings():
    """Within layers 0 and 1 there are 3 × 3 relabellings; the observed one gives the unique largest difference
    (layer 0's sink the 3, layer 1's other the 4), so each permutation reaches it with probability 1/9; layers 2
    and 3 cannot move. With `greater=False` every relabelling is at most as large: p = 1 exactly. Killed by
    `>= observed - 1e-12` → `> observed + 1e-12` (the observed labelling itself never counted: p = 1/901) and by
    permuting all labels together instead of within layers (`permuted[index] = rng.permutation(is_sink[index])` →
    `permuted[index] = rng.permutation(is_sink)[index]`)."""
    p = within_layer_permutation_p(VALUES, IS_SINK, LAYERS, greater=True, n_perm=900, seed=1)
    assert p == pytest.approx(1 / 9, abs=0.035)  # binomial sd of the share: √(1/9 · 8/9 / 900) ≈ 0.0105
    assert within_layer_permutation_p(VALUES, IS_SINK, LAYERS, greater=False, n_perm=50) == 1.0
    assert math.isnan(within_layer_permutation_p(VALUES[6:], IS_SINK[6:], LAYERS[6:], greater=True, n_perm=5))


def test_stratified_resamples_draw_each_unit_from_its_own_stratum():
    """Strata of sizes 2, 3, 1: every resample keeps each stratum's size and draws its members only from that
    stratum (the one-unit stratum always itself). Killed by `members[rng.integers(0, members.size, ...)]` →
    `rng.integers(0, strata.size, ...)`."""
    strata = np.array([5, 5, 7, 7, 7, 9])
    draws = stratified_indices(strata, n_boot=200, seed=3)
    assert draws.shape == (200, 6)
    assert set(np.unique(draws[:, :2])) == {0, 1} and set(np.unique(draws[:, 2:5])) == {2, 3, 4}
    assert (draws[:, 5] == 5).all()


def test_crossed_resamples_draw_whole_windows_and_whole_draws():
    """Units (W, D) = (3, 4) with value 10·w + d: every crossed resample is original[rows][:, cols] — one window
    index per row, one draw index per column. Killed by `[:, cols[b]]` → `[:, rows[b]]` and by
    `bootstrap_indices(D, n_boot, seed + 1)` → `bootstrap_indices(W, n_boot, seed + 1)`."""
    units = {"loss": np.add.outer(10 * np.arange(3), np.arange(4)).astype(float)}
    for sample in resamples(units, n_boot=50, seed=2, crossed=True):
        grid = sample["loss"]
        assert grid.shape == (3, 4)
        windows, draws = grid // 10, grid % 10
        assert (windows == windows[:, :1]).all() and (draws == draws[:1]).all()
    seen = {int(d) for sample in resamples(units, n_boot=50, seed=2, crossed=True) for d in sample["loss"][0] % 10}
    assert seen == {0, 1, 2, 3}  # draw 3 exists only past the window count
