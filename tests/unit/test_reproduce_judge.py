"""The judge of `sinkscope reproduce` (`reproduction.verdicts`) on constructed inputs: one test per rule of its
docstring (a stated minimum of units; p-values never decide; failed resamples count; the point verdict no
stronger than the resamples' majority; every threshold varied; the right resampling unit), and Simpson's
paradox for the within-layer comparisons (`reproduction.strata`)."""

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from sinkscope.reproduction import verdicts as v
from sinkscope.reproduction.ablation_claims import sink_ablation_verdict
from sinkscope.reproduction.cost_claims import cost_real_verdict
from sinkscope.reproduction.geometry_claims import geometry_verdict, representability_verdict
from sinkscope.reproduction.sink_rate_claims import gu_sink_rate_verdict
from sinkscope.reproduction.smoothing_claims import oversmoothing_verdict
from sinkscope.reproduction.strata import (
    rowwise_spearman,
    stratified_difference,
    within_layer_permutation_p,
)
from sinkscope.reproduction.switch_claims import (
    switch_routes_verdict,
    switch_verdict,
    value_drain_verdict,
)
from sinkscope.reproduction.weight_claims import weights_verdict

M = "m"
S, P, N, NM = v.SUPPORTED, v.PARTLY, v.NOT_SUPPORTED, v.NOT_MEASURABLE


def mean_effect(u, th):
    return {"mean": float(u["values"].mean())}


def test_too_few_units_is_not_measurable_with_the_minimum_stated():
    values = np.full(5, 3.0)
    result = v.judge("x", M, {"values": values}, mean_effect, lambda e, th: v.graded(e["mean"], 1, 0), {},
                     over="windows", min_units=8)  # fmt: skip
    assert result.verdict == NM and result.reason == "too few windows: 5 (a verdict needs at least 8)"
    assert v.judge("x", M, {"values": np.full(8, 3.0)}, mean_effect, lambda e, th: v.graded(e["mean"], 1, 0), {},
                   over="windows", min_units=8).verdict == S  # fmt: skip
    with pytest.raises(ValueError, match="stated minimum"):
        v.judge("x", M, {"values": values}, mean_effect, lambda e, th: S, {}, over="windows")
    # The claims state theirs: an ablation needs 8 windows and 20 draws (--quick has 2 and 2).
    few_windows = sink_ablation_verdict(M, np.zeros(2), np.ones((2, 20)), np.ones((2, 20)))
    few_draws = sink_ablation_verdict(M, np.zeros(8), np.ones((8, 2)), np.ones((8, 2)))
    assert few_windows.reason.startswith("too few windows: 2") and few_draws.reason.startswith("too few draws: 2")


def test_p_values_never_decide():
    """A decision that reads a p-value fails loudly: `decide` never sees one (the Mann-Whitney p = 0.003 of two
    groups whose effect's interval spans zero cannot make a verdict)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 30), np.r_[rng.normal(-0.8, 0.2, 29), 40.0]
    p = float(mannwhitneyu(a, b, alternative="greater").pvalue)
    assert p < 0.01

    def effects(u, th):
        return {"difference": float(u["a"].mean() - u["b"].mean()), "p_value": p}

    def by_p(e, th):
        return S if e["p_value"] < th["alpha"] else N

    with pytest.raises(KeyError, match="p_value"):  # declared fields only, however the p-value is spelled
        v.judge("x", M, {"a": a, "b": b[:30]}, effects, by_p, {"alpha": 0.05}, over="windows", min_units=8,
                decides_on=("difference",))  # fmt: skip
    # Decided on the effect, the same data is capped by the interval of the difference (mean b is pulled up by
    # one value, so resamples without it and with it disagree).
    result = v.judge("x", M, {"a": a, "b": b}, effects, lambda e, th: v.graded(e["difference"], 0.5, 0.0), {},
                     over="windows", min_units=8)  # fmt: skip
    assert result.evidence["p_value"] == p and result.verdict != S


def test_a_resample_whose_control_fails_counts_as_failed():
    """Random-set Δloss with a mean barely above zero: the point ratio is small (supported), but in many
    resamples the control's mean is ≤ 0 and the ratio does not exist; those resamples count as failures."""
    draws = np.random.default_rng(1).normal(0.05, 0.5, 30)

    def effects(u, th):
        mean = float(u["random"].mean())
        return {"ratio": 0.001 / mean if mean > 0 else math.nan}

    def decide(e, th):
        return NM if not math.isfinite(e["ratio"]) else v.graded(e["ratio"], th["cut"], 1.0, higher_is_better=False)

    assert draws.mean() > 0 and decide(effects({"random": draws}, {}), {"cut": 0.5}) == S
    result = v.judge("x", M, {"random": draws}, effects, decide, {"cut": 0.5}, over="draws", min_units=20)
    assert result.verdict == NM and "fails in" in result.reason
    failed = float(result.reason.split("fails in ")[1].split("%")[0])
    assert 10 < failed < 60
    assert v.capped(S, [S] * 98 + [NM] * 2) == (S, "")  # 2 % failures stay inside the 95 % range
    assert v.capped(S, [S] * 96 + [NM] * 4)[0] == NM


def test_the_point_verdict_is_never_stronger_than_the_resamples_majority():
    assert v.capped(S, [P] * 1000)[0] == P
    assert v.capped(S, [N] * 600 + [P] * 400)[0] == N  # one step apart would say partly; the majority says not
    # ... and never stronger than the point: a `not supported` point with resamples mostly `partly` stays
    assert v.capped(N, [P] * 900 + [N] * 100)[0] == N
    # Through the judge: an effect that exists only when every unit is present (never in a resample).
    values = np.arange(12.0)

    def effects(u, th):
        return {"distinct": float(np.unique(u["values"]).size == values.size)}

    result = v.judge("x", M, {"values": values}, effects, lambda e, th: v.graded(e["distinct"], 1, 0.5), {},
                     over="windows", min_units=8)  # fmt: skip
    assert result.evidence["distinct"] == 1.0 and result.verdict == N
    assert "stronger than the majority" in result.reason


def test_every_threshold_is_varied():
    def decide(e, th):
        return S if e["mean"] >= th["cut"] and e["mean"] <= th["ceiling"] else N

    result = v.judge("x", M, {"values": np.full(10, 1.0)}, mean_effect, decide, {"cut": 0.3, "ceiling": 1.5},
                     over="windows", min_units=8)  # fmt: skip
    assert {(r["threshold"], r["scale"]) for r in result.sensitivity} == {("cut", 0.5), ("cut", 2.0),
                                                                          ("ceiling", 0.5), ("ceiling", 2.0)}  # fmt: skip
    assert result.verdict == P and "depends on ceiling" in result.reason


@pytest.mark.parametrize("claim", ["geometry", "switch", "switch_routes", "value_drain", "sink_ablation",
                                   "representability", "weights_low_rank", "weights_bos_alignment", "oversmoothing",
                                   "cost_real_layers", "gu_sink_rate"])  # fmt: skip
def test_each_claim_varies_every_threshold_it_decides_with(claim):
    result = CONSTRUCTED[claim]()
    assert result.verdict in (S, P, N), result.reason
    assert {r["threshold"] for r in result.sensitivity if r["verdict"] is not None} == set(result.thresholds), claim
    assert all(r["not_varied"] for r in result.sensitivity if r["verdict"] is None), claim  # never silently


def test_crossed_and_stratified_resamples():
    grid = np.arange(12.0).reshape(4, 3)  # (windows, draws)
    drawn = v.resamples({"x": grid}, n_boot=5, seed=2, crossed=True)
    rows, cols = v.bootstrap_indices(4, 5, 2), v.bootstrap_indices(3, 5, 3)
    for b, resample in enumerate(drawn):
        assert np.array_equal(resample["x"], grid[rows[b]][:, cols[b]])
    strata = np.array([0, 0, 0, 1, 1, 2])
    for resample in v.resamples({"s": strata, "i": np.arange(6)}, n_boot=50, seed=0, strata=strata):
        assert np.array_equal(resample["s"], strata)  # each unit is drawn from its own stratum
        assert np.array_equal(strata[resample["i"]], strata)


def test_a_joint_windows_by_draws_interval_is_wider_than_over_draws_alone():
    rng = np.random.default_rng(4)
    window_effect = rng.normal(0, 0.3, (10, 1))  # windows differ a lot, draws a little
    control = 1.0 + window_effect + rng.normal(0, 0.05, (10, 20))
    selected = 0.3 + rng.normal(0, 0.3, 10)
    joint = sink_ablation_verdict(M, selected, control, control)
    draws_only = v.judge("x", M, {"c": control.mean(0)}, lambda u, th: {"ratio": selected.mean() / u["c"].mean()},
                         lambda e, th: S, {}, over="draws", min_units=20)  # fmt: skip
    width = joint.interval["high"] - joint.interval["low"]
    assert width > 3 * (draws_only.interval["high"] - draws_only.interval["low"])


# --- Simpson's paradox ---------------------------------------------------------------------------------------


def simpson():
    """Two layers: layer 0 has 20 sink heads (≈ 0.90) and 3 others (≈ 1.00); layer 1 has 3 sink heads (≈ 0.10)
    and 20 others (≈ 0.20). Within each layer sink heads score 0.1 lower; pooled, they score higher."""
    rng = np.random.default_rng(5)
    values = np.r_[0.9 + rng.normal(0, 0.01, 20), 1.0 + rng.normal(0, 0.01, 3),
                   0.1 + rng.normal(0, 0.01, 3), 0.2 + rng.normal(0, 0.01, 20)]  # fmt: skip
    is_sink = np.r_[np.ones(20), np.zeros(3), np.ones(3), np.zeros(20)].astype(bool)
    layers = np.r_[np.zeros(23), np.ones(23)].astype(int)
    return values, is_sink, layers


def test_simpsons_paradox_pooled_wrong_stratified_right():
    values, is_sink, layers = simpson()
    pooled_p = float(mannwhitneyu(values[is_sink], values[~is_sink], alternative="greater").pvalue)
    assert pooled_p < 0.01 and np.median(values[is_sink]) > np.median(values[~is_sink])  # pooled: "higher"
    difference, standardised, used = stratified_difference(values, is_sink, layers)
    assert used == 2 and difference == pytest.approx(-0.1, abs=0.01) and standardised < -3
    assert within_layer_permutation_p(values, is_sink, layers, greater=True, n_perm=200) > 0.9
    result = weights_verdict("weights_bos_alignment", M, values, is_sink, layers)
    assert result.verdict == N and result.evidence["pooled_median_difference"] > 0
    assert result.evidence["effect_within_layers"] < 0
    low_rank = weights_verdict("weights_low_rank", M, values, is_sink, layers, head_dim=64)  # "sink lower": holds within
    # read as a rank, "sink lower" holds within layers (and the level 0.1–0.9 ≤ rank_max 2): supported
    assert low_rank.evidence["effect_within_layers"] > 3 and low_rank.verdict == S


def test_within_layer_rank_correlation():
    x = np.r_[0, 1, 2, 10, 11, 12.0]
    y = np.r_[2, 1, 0, 12, 11, 10.0]  # layers are the rows: pooled ρ > 0, within each ρ = −1
    assert rowwise_spearman(x.reshape(2, 3), y.reshape(2, 3)) == (pytest.approx(-1.0), 2)
    assert math.isnan(rowwise_spearman(x.reshape(3, 2), y.reshape(3, 2))[0])  # a layer needs ≥ 3 units
    flat = np.r_[0, 1, 2, 5, 5, 5.0], np.r_[2, 1, 0, 1, 2, 3.0]  # layer 1 has no spread in x: left out
    assert rowwise_spearman(flat[0].reshape(2, 3), flat[1].reshape(2, 3)) == (pytest.approx(-1.0), 1)


# --- constructed inputs of every judged claim (used above) -------------------------------------------------------


def _geometry():
    W, L, T = 10, 9, 10
    full = np.full((W, L), T)
    return geometry_verdict(M, {"z": full, "z_control": np.zeros((W, L)), "h": full, "h_control": np.zeros((W, L))}, T)


def _switch():
    counts = np.zeros((10, 3, 3, 2, 2, 3))
    counts[..., 0, :], counts[..., 1, :] = [10, 10, 10], [0, 0, 10]  # a hard switch and a sink that stays on
    drains = np.tile([[0.0, 2.0], [0.0, 2.0]], (10, 1, 1))
    return switch_verdict(M, {"head_counts": counts, "head_drain": drains, "tau": np.array(0.1),
                              "delta": np.array(0.1)}, 10, 0.1)  # fmt: skip


def _routes():
    counts = np.zeros((10, 3, 3, 6))
    counts[..., 0] = 10
    return switch_routes_verdict(M, counts, ["bos_sink", "cancellation", "bos_partial", "self", "low"],
                                 [True, False, True, False, False])  # fmt: skip


def _drain():
    W, L, KV, H = 10, 4, 3, 6
    hard = np.zeros((W, 3, L, H))  # at δ × ½, 1, 2
    hard[..., 0] = 60  # kv group 0 of each layer sinks
    drains = np.ones((W, L, KV))
    drains[:, :, 0] = 0.1
    drains += np.random.default_rng(0).normal(0, 0.01, drains.shape)
    return value_drain_verdict(M, drains, hard, 63)


def _ablation():
    rng = np.random.default_rng(0)
    return sink_ablation_verdict(M, np.full(10, 0.01), 1 + rng.normal(0, 0.1, (10, 20)),
                                 1 + rng.normal(0, 0.1, (10, 20)))  # fmt: skip


def _certificates():
    layers = [{"layer": i, "n_contexts": 100, "h1": True, "h2": True, "gamma2_rel": 0.9,
               "control_gamma2_rel": list(np.linspace(0.1, 0.4, 20))} for i in range(6)]  # fmt: skip
    return representability_verdict(M, layers, width=10)


def _weights(claim):
    rng = np.random.default_rng(0)
    layers = np.repeat(np.arange(4), 10)
    is_sink = np.tile(np.r_[np.ones(5), np.zeros(5)], 4).astype(bool)
    base = 1.0 if claim == "weights_low_rank" else 0.8
    values = np.where(is_sink, base, base + (3 if claim == "weights_low_rank" else -0.5)) + rng.normal(0, 0.05, 40)
    return weights_verdict(claim, M, values, is_sink, layers, head_dim=64)


def _oversmoothing():
    return oversmoothing_verdict(M, np.full(40, 0.1), np.ones(40, bool), np.repeat(np.arange(4), 10))


def _cost():
    return cost_real_verdict(M, np.ones((8, 3)), [8, 16, 32])


def _gu():
    high = np.full((10, 2, 2), 0.9)
    return gu_sink_rate_verdict(M, {"natural": high, "random": high, "repeat": high})


CONSTRUCTED = {"geometry": _geometry, "switch": _switch, "switch_routes": _routes, "value_drain": _drain,
               "sink_ablation": _ablation, "representability": _certificates,
               "weights_low_rank": lambda: _weights("weights_low_rank"),
               "weights_bos_alignment": lambda: _weights("weights_bos_alignment"), "oversmoothing": _oversmoothing,
               "cost_real_layers": _cost, "gu_sink_rate": _gu}  # fmt: skip
