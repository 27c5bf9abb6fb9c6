"""Draw 51 (issue 34) in the reproduction's claim modules, generalised by kind:

- every early return (`not measurable here`) checked whole: claim, model, verdict word, evidence, the thresholds
  written out by hand (never the module's constant) and the reason;
- the record of a verdict checked key by key (`n_layers` of `dense_causal` and its siblings);
- threshold comparisons probed AT the threshold (value == cut, so `>` and `>=` differ), where every window or
  head is the same so no resample moves the verdict, and the reason names what halving or doubling a threshold
  does (worked out by hand from the docstrings: fractions on the odds scale x/(1 − x));
- default arguments (δ, τ, fraction, seed, taus) read from the verdict against their documented values.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sinkscope.reproduction import (
    ablation_claims,
    cost_claims,
    experiment_claims,
    geometry_claims,
    smoothing_claims,
    switch_claims,
    weight_claims,
)
from sinkscope.reproduction.strata import middle_layers, rowwise_spearman
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, PARTLY, Verdict

W = 8  # MIN_WINDOWS


def _whole(
    verdict: Verdict, claim: str, model: str, word: str, evidence: dict, thresholds: dict, reason: str
):
    assert verdict == Verdict(claim, model, word, evidence, thresholds, reason), verdict


# -- early returns, whole ------------------------------------------------------------------------------------------


def test_every_early_return_is_a_whole_verdict_with_its_thresholds():
    geometry = {
        "positive_token_tol": 0.05,
        "failing_layer_tol": 0.2,
        "partly_layer_frac": 0.2,
        "middle_margin": 0.25,
    }
    for counts in ({}, {"z": np.zeros(5)}, {"h_control": np.zeros((8, 3))}):
        verdict = geometry_claims.geometry_verdict("m", counts, tokens=10)
        _whole(verdict, "geometry", "m", NOT_MEASURABLE, {}, geometry, "no per-window BOS cosines")

    representability = {"failing_layer_tol": 0.2, "partly_layer_frac": 0.2, "beaten_control_frac": 0.95,
                        "partly_beaten_frac": 0.5}
    verdict = geometry_claims.representability_verdict("m", [], width=4)
    _whole(verdict, "representability", "m", NOT_MEASURABLE, {}, representability, "no certificates")
    row = {
        "layer": 1,
        "n_contexts": 10,
        "h1": True,
        "h2": True,
        "gamma2_rel": 1.0,
        "control_gamma2_rel": [0.5] * 19,
    }
    verdict = geometry_claims.representability_verdict(
        "m", [row, row | {"n_contexts": 12}], width=10
    )  # n == width
    _whole(verdict, "representability", "m", NOT_MEASURABLE, {"n_contexts": 10, "width": 10, "n_controls": 19},
           representability, "the certificate sample (10 tokens) is not larger than the model width (10): any token "
           "would pass")  # fmt: skip
    verdict = geometry_claims.representability_verdict("m", [row], width=9)  # n = width + 1, 19 controls
    _whole(verdict, "representability", "m", NOT_MEASURABLE,
           {"n_contexts": 10, "width": 9, "n_controls": 19, "n_control_tokens": 19}, representability,
           "too few control tokens: 19 (a verdict needs at least 20)")  # fmt: skip
    twenty = geometry_claims.representability_verdict(
        "m", [row | {"control_gamma2_rel": [0.5] * 20}], width=9
    )
    assert twenty.reason == "too few middle layers: 1 (a verdict needs at least 4)"  # past the controls' gate

    verdict = cost_claims.cost_real_verdict("m", np.zeros((0, 2)), [8, 16])
    _whole(verdict, "cost_real_layers", "m", NOT_MEASURABLE, {}, {"losing_pair_tol": 0.2, "partly_frac": 0.5},
           "no feasible pattern solved")  # fmt: skip
    verdict = cost_claims.cost_real_verdict("m", np.ones(4), [8])  # one axis: not per window
    assert verdict.verdict == NOT_MEASURABLE and verdict.reason == "no feasible pattern solved"
    verdict = switch_claims.mlp_like_verdict("m", np.zeros((0, 3)), queries=5)
    _whole(verdict, "mlp_like", "m", NOT_MEASURABLE, {}, {}, "no per-layer MLP-like counts")

    trained = {"miss_tol": 0.1, "partly_min": 0.5, "control_min": 0.5}
    verdict = experiment_claims.cost_boundary_trained_verdict(None)
    _whole(verdict, "cost_boundary_trained", "synthetic", NOT_MEASURABLE, {}, trained, "no runs")
    verdict = experiment_claims.cost_boundary_trained_verdict(pd.DataFrame(), "the lab was not run")
    _whole(verdict, "cost_boundary_trained", "synthetic", NOT_MEASURABLE, {}, trained, "the lab was not run")

    verdict = smoothing_claims.oversmoothing_verdict("m", [0.1] * 19, [True] * 19, [0] * 19)
    _whole(verdict, "oversmoothing", "m", NOT_MEASURABLE, {"n_heads": 19},
           {"counteract_tol": 0.2, "partly_frac": 0.5, "rise_min": 0.001}, "too few heads: 19 (a verdict needs at least 20)")  # fmt: skip

    cosines = _cosines({(0, h): 0.5 for h in range(19)} | {(0, -1): 0.5})
    verdict = experiment_claims.dense_causal_verdict("m", cosines)
    _whole(verdict, "dense_causal", "m", NOT_MEASURABLE, {"n_heads": 19},
           {"counteract_tol": 0.2, "partly_frac": 0.5, "rise_min": 1e-4}, "too few heads: 19 (a verdict needs at least "
           "20)")  # fmt: skip

    # weights: one layer holds both classes (a verdict needs 2); the evidence counts the classes, thresholds whole
    values, scores, layers = [1.0, 2.0, 3.0, 4.0], [0.9, 0.1, 0.9, 0.9], [0, 0, 1, 1]
    verdict = weight_claims.weights_verdict("weights_low_rank", "m", values, scores, layers, head_dim=64)
    _whole(verdict, "weights_low_rank", "m", NOT_MEASURABLE,
           {"n_sink_heads": 3, "n_other_heads": 1, "layers_with_both": 1, "claimed_direction": "sink heads lower",
            "n_layers_holding_sink_and_other_heads": 1}, {"min_effect": 0.2, "rank_max": 2.0, "epsilon": 0.3, "partly_rank_frac": 0.5},
           "too few layers holding sink and other heads: 1 (a verdict needs at least 2)")  # fmt: skip
    verdict = weight_claims.weights_verdict("weights_bos_alignment", "m", values, scores, layers, n_layers=4)
    assert verdict.thresholds == {
        "min_effect": 0.2,
        "rank1_score": 0.5,
        "epsilon": 0.3,
        "middle_margin": 0.25,
    }
    assert verdict.evidence["claimed_direction"] == "sink heads higher"
    verdict = weight_claims.weights_verdict("weights_bos_alignment", "m", values, scores, layers)  # no depth
    assert verdict.thresholds == {"min_effect": 0.2, "rank1_score": 0.5, "epsilon": 0.3}


# -- records and boundaries ----------------------------------------------------------------------------------------


def _cosines(deltas: dict[tuple[int, int], float], spike: tuple = ()) -> pd.DataFrame:
    """Per-window cosines: cos = 0 at λ = 0 and `deltas[(layer, head)]` at λ = 1 in all W windows, except the units
    in `spike`: 8 × delta in window 0 and 0 elsewhere (a mean of exactly delta: 8 × 1e-4 and 8e-4 / 8 are exact,
    where a sum of eight 1e-4 is not)."""
    rows = []
    for w in range(W):
        for (layer, head), delta in deltas.items():
            at = (W * delta if w == 0 else 0.0) if (layer, head) in spike else delta
            rows += [
                {"window": w, "layer": layer, "head": head, "lam": lam, "cos": at * lam} for lam in (0.0, 1.0)
            ]
    return pd.DataFrame(rows)


def test_dense_causal_record_and_its_rise_min_boundary():
    """Heads 0–3 of layer 0 and layer 1 as a whole rise by exactly rise_min = 1e-4 on average (not "more than"):
    16 of 20 heads and 1 of 2 layers smooth: partly (max 0.8 ≥ ½, min 0.5 < 0.8). Resamples that draw window 0
    twice or more (P ≈ 0.26) smooth everywhere (supported): the range is partly … supported; at rise_min / 2
    every unit smooths, so the verdict also depends on rise_min."""
    boundary = [(0, 0), (0, 1), (0, 2), (0, 3), (1, -1)]
    deltas = {(0, h): 1e-4 if h < 4 else 0.5 for h in range(10)} | {(1, h): 0.5 for h in range(10)}
    cosines = _cosines(deltas | {(0, -1): 0.5, (1, -1): 1e-4}, spike=boundary)
    verdict = experiment_claims.dense_causal_verdict("m", cosines)
    assert verdict.claim == "dense_causal" and verdict.model == "m" and verdict.verdict == PARTLY
    assert verdict.evidence == {"n_heads": 20, "n_layers": 2, "head_share_smoothing": 0.8,
                                "layer_share_smoothing": 0.5, "best_share_smoothing": 0.8, "median_dcos_head": 0.5,
                                "median_dcos_layer": pytest.approx((0.5 + 1e-4) / 2, rel=1e-12)}  # fmt: skip
    assert verdict.thresholds == {"counteract_tol": 0.2, "partly_frac": 0.5, "rise_min": 1e-4}
    assert verdict.reason == ("the 95% bootstrap range of the verdict is partly … supported; fragile: supported at "
                              "rise_min = 5e-05")  # fmt: skip
    assert verdict.interval == {"effect": "best_share_smoothing", "estimate": 0.8, "low": 0.8, "high": 1.0,
                                "level": 0.95, "over": "windows", "n": 8,
                                "primary": {"effect": "head_share_smoothing", "estimate": 0.8, "low": 0.8,
                                            "high": 1.0}}  # fmt: skip


def test_oversmoothing_counts_a_rise_of_exactly_rise_min_as_none():
    """Layer 0: 4 heads rise by exactly rise_min = 0.001 (not more: no oversmoothing); layer 1: one head rises by 0
    (the predictor says no: consistent, as 0 is no rise); layer 2: 15 heads rise by 0.01. Each layer is uniform, so
    no resample within layers moves a number. 15 of 20 oversmooth: partly (≥ ½, < 0.8); supported at
    counteract_tol 1/3 (odds 0.25 × 2) and at rise_min / 2."""
    rise = [0.001] * 4 + [0.0] + [0.01] * 15
    dense = [True] * 4 + [False] + [True] * 15
    layers = [0] * 4 + [1] + [2] * 15
    verdict = smoothing_claims.oversmoothing_verdict("m", rise, dense, layers)
    assert verdict.claim == "oversmoothing" and verdict.model == "m" and verdict.verdict == PARTLY
    assert verdict.evidence == {"n_heads": 20, "frac_observed_rise": 0.75, "frac_dense_more_measured": 0.95,
                                "consistency_predictor_vs_observed": 1.0}  # fmt: skip
    assert verdict.thresholds == {"counteract_tol": 0.2, "partly_frac": 0.5, "rise_min": 0.001}
    assert verdict.reason == ("fragile: supported at counteract_tol = 0.333; supported at rise_min = 0.0005")
    assert verdict.interval["over"] == "heads (within strata)" and verdict.interval["n"] == 20


def test_geometry_holds_at_exactly_one_minus_the_token_tolerance():
    """19 of 20 tokens non-positive in every layer and window: BOS's fraction is 0.95 = 1 − 0.05, so every layer
    holds (≥), the control (0 of 19) does not; L = 5 has middle layers 1, 2, 3 (l / 4 in ¼ … ¾). Supported, but at
    positive_token_tol × ½ on the odds scale (0.0256) no layer holds: partly, depending on it."""
    counts = {"z": np.full((W, 5), 19.0), "z_control": np.zeros((W, 5))}
    verdict = geometry_claims.geometry_verdict("m", counts, tokens=20)
    assert verdict.evidence == {"representations": ["z"], "middle_layers_holding": 1.0,
                                "middle_layers_holding_best": 1.0, "middle_layers_holding_z": 1.0,
                                "all_layers_holding_z": 1.0, "control_layers_holding_z": 0.0,
                                "middle_mean_nonpos_frac_z": pytest.approx(0.95, rel=1e-12)}  # fmt: skip
    assert verdict.verdict == PARTLY
    assert verdict.reason == "depends on positive_token_tol (positive_token_tol: not supported at 0.0256)"


def test_sink_in_use_at_exactly_its_cuts_and_without_an_eviction_cost():
    """Cost 1, the sink recovers 0.5 (= recovered_min) and the control 0.25 (= control_max × the sink's share):
    supported at the point; partly at recovered_min 2/3 and at control_max 1/3 (odds × 2 and × ½)."""
    losses = {
        "full": np.full(W, 1.0),
        "recent": np.full(W, 2.0),
        "sink": np.full(W, 1.5),
        "control": np.full(W, 1.75),
    }
    verdict = experiment_claims.sink_in_use_verdict("m", losses, {"T": 64})
    assert verdict.evidence == {
        "T": 64,
        "delta_sink_kept": 0.5,
        "recovered_share": 0.5,
        "control_recovered_share": 0.25,
        "eviction_cost": 1.0,
        "delta_control_kept": 0.25,
    }
    assert verdict.thresholds == {"recovered_min": 0.5, "control_max": 0.5, "partly_min": 0.2}
    assert verdict.verdict == PARTLY
    assert verdict.reason == ("depends on recovered_min, control_max (recovered_min: partly at 0.667; control_max: "
                              "partly at 0.333)")  # fmt: skip
    free = experiment_claims.sink_in_use_verdict(
        "m", losses | {"recent": np.full(W, 1.0)}
    )  # eviction costs 0
    assert free.verdict == NOT_MEASURABLE and free.reason == "not defined on this data: recovered_share"
    assert free.evidence["eviction_cost"] == 0.0 and math.isnan(free.evidence["recovered_share"])


def test_prevalence_at_exactly_ratio_min_times_the_diagonal_share():
    """Per window 4 sink, 2 diagonal, 4 other heads of 10: sink 0.4 = 2 × 0.2 and ≥ sink_min: supported; at
    ratio_min 4 partly (0.4 > 0.2). Equal shares: not a majority (partly needs sink > diagonal)."""
    kinds = ["sink"] * 4 + ["diagonal"] * 2 + ["other"] * 4
    scores = {"sink": (0.9, 0.0), "diagonal": (0.0, 0.9), "other": (0.1, 0.1)}  # (A[t,0], A[t,t])
    classes = pd.DataFrame([{"window": w, "layer": 0, "head": h, "sink_score": scores[c][0],
                             "diag_score": scores[c][1], "class": c} for w in range(W)
                            for h, c in enumerate(kinds)])  # fmt: skip
    verdict = experiment_claims.prevalence_verdict("m", classes)
    assert verdict.evidence == {"heads_per_window": 10, "sink_minus_diagonal": pytest.approx(0.2), "sink_share": 0.4,
                                "diagonal_share": 0.2, "both_share": 0.0, "sink_over_diagonal": 2.0}  # fmt: skip
    assert verdict.verdict == PARTLY and verdict.reason == "depends on ratio_min (ratio_min: partly at 4)"
    even = pd.DataFrame([{"window": w, "layer": 0, "head": h, "sink_score": 0.9 if h < 5 else 0.0,
                          "diag_score": 0.0 if h < 5 else 0.9} for w in range(W) for h in range(10)])  # fmt: skip
    tie = experiment_claims.prevalence_verdict("m", even)
    assert (
        tie.evidence["sink_minus_diagonal"] == 0.0
        and tie.verdict == "not supported"
        and tie.reason == "fragile: supported at ratio_min = 1"
    )
    assert [r["verdict"] for r in tie.sensitivity if r["threshold"] == "ratio_min"] == [
        "supported",
        "not supported",
    ]


def _ratio(selected: float, control: float, **kwargs) -> Verdict:
    return ablation_claims.sink_ablation_verdict("m", np.full(W, selected), np.full((W, 20), control),
                                                 np.full((W, 20), control), **kwargs)  # fmt: skip


HEAD_FRACTION = ("the head fraction (10% of heads) is fixed by the ablation pass: another fraction needs another set "
                 "and its controls (the sensitivity passes of `ablate-sensitivity/`, not run here: --quick, or a run "
                 "without that section)")  # fmt: skip
DELTA = ("δ = 0.1 picks the zeroed sink queries in the sink-query pass: another δ needs another pass (the sensitivity "
         "passes of `ablate-sensitivity/`, not run here: --quick, or a run without that section)")  # fmt: skip


def test_ablation_ratio_at_its_cuts_and_the_default_fraction_and_delta():
    """Ratio 0.5 = supported_ratio (≤: supported; partly at 0.25); ratio 1 = partly_ratio (<: not supported;
    supported at supported_ratio 1, partly at partly_ratio 2); a control that costs exactly 0 has no ratio."""
    at_supported = _ratio(0.5, 1.0)
    assert at_supported.evidence == {
        "ratio": 0.5,
        "delta_selected": 0.5,
        "ratio_same_heads": 0.5,
        "ratio_random": 0.5,
        "delta_same_heads_mean": 1.0,
        "delta_random_mean": 1.0,
        "selected_lowers_loss": 0.0,
        "ratio_of": "|mean Δ(selected)| / mean Δ(control)",
    }
    assert at_supported.thresholds == {"supported_ratio": 0.5, "partly_ratio": 1.0, "n_draws": 20.0}
    assert at_supported.verdict == PARTLY
    assert at_supported.reason == "depends on supported_ratio (supported_ratio: partly at 0.25)"
    fixed = [r for r in at_supported.sensitivity if r["verdict"] is None]
    assert fixed == [
        {"threshold": "n_draws", "scale": 2.0, "value": 40.0, "verdict": None,
         "not_varied": "only 20 draws of each control were measured"},
        {"threshold": "head_fraction", "scale": None, "value": None, "verdict": None, "not_varied": HEAD_FRACTION},
        {"threshold": "sink_query_delta", "scale": None, "value": None, "verdict": None, "not_varied": DELTA},
    ]  # fmt: skip
    at_partly = _ratio(1.0, 1.0)
    assert at_partly.verdict == "not supported" and at_partly.reason == (
        "fragile: supported at supported_ratio = 1; partly at partly_ratio = 2"
    )
    free = _ratio(0.5, 0.0)
    assert free.verdict == NOT_MEASURABLE
    assert free.reason == "not defined on this data: ratio, ratio_same_heads, ratio_random"
    dormant = ablation_claims.dormant_heads_verdict("m", np.full(W, 0.5), np.ones((W, 20)), np.ones((W, 20)))
    assert [r["not_varied"] for r in dormant.sensitivity if r["threshold"] == "head_fraction"] == [
        HEAD_FRACTION
    ]


# -- defaults ------------------------------------------------------------------------------------------------------


def test_documented_defaults_of_the_claims():
    """δ = τ = 0.1, the τ grid of the switch curves, the middle band ¼ … ¾, rowwise ρ's gate of 3 units, and
    seed 0 (a default call equals the same call with seed = 0, where seed 1 draws other resamples)."""
    counts = np.random.default_rng(0).integers(0, 20, size=(W, 3, 14, 4)).astype(float)
    heads = np.random.default_rng(0).integers(0, 20, size=(W, 3, 3, 2, 3, 3)).astype(float)
    arrays = {"head_counts": heads, "head_drain": np.random.default_rng(1).random((W, 2, 3)), "tau": np.array(0.1),
              "delta": np.array(0.1)}  # fmt: skip
    switch = switch_claims.switch_verdict("m", arrays, 63, 0.1)
    assert switch.thresholds == {"tau": 0.1, "delta": 0.1, "drain_max": 0.1, "miss_tol": 0.1, "partly_min": 0.5,
                                 "min_head_queries": 10.0}  # fmt: skip
    assert switch == switch_claims.switch_verdict("m", arrays, 63, 0.1, seed=0)
    assert switch.interval != switch_claims.switch_verdict("m", arrays, 63, 0.1, seed=1).interval
    routes = switch_claims.switch_routes_verdict(
        "m", counts[:, :, :3, :3], ["bos_sink", "other"], [True, False]
    )
    assert routes.thresholds == {"tau": 0.1, "delta": 0.1, "rare_tol": 0.1, "partly_tol": 0.5}
    drains = np.random.default_rng(1).random((W, 2, 2))
    hard = np.random.default_rng(2).integers(0, 5, size=(W, 2, 4)).astype(float)
    drain = switch_claims.value_drain_verdict("m", drains, hard, queries=5)
    assert drain.thresholds == {"rho_min": 0.3, "drain_max": 0.5, "sink_head_hard_frac": 0.5,
                                "min_groups_per_layer": 3, "delta": 0.1}  # fmt: skip
    losses = {name: np.random.default_rng(i).random(W) + (2.0 if name == "recent" else 0.0)
              for i, name in enumerate(("full", "recent", "sink", "control"))}  # fmt: skip
    eviction = experiment_claims.sink_in_use_verdict("m", losses)
    assert eviction == experiment_claims.sink_in_use_verdict("m", losses, seed=0)
    assert eviction.interval != experiment_claims.sink_in_use_verdict("m", losses, seed=1).interval
    wins = np.random.default_rng(3).random((8, 2))  # MIN_COST_WINDOWS
    cost = cost_claims.cost_real_verdict("m", wins, [8, 16])
    assert cost == cost_claims.cost_real_verdict("m", wins, [8, 16], seed=0)
    assert cost.interval != cost_claims.cost_real_verdict("m", wins, [8, 16], seed=1).interval
    # l / (L − 1) in ¼ … ¾: L = 5 and 9 reach ¼ and ¾ exactly (in); L = 6 has 0.2 and 0.8 (out); L = 2 has none
    assert (
        middle_layers(9) == [2, 3, 4, 5, 6] and middle_layers(5) == [1, 2, 3] and middle_layers(6) == [2, 3]
    )
    assert middle_layers(2) == [1] and middle_layers(1) == [0] and middle_layers(0) == []
    x = np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]])
    assert rowwise_spearman(x, x) == (pytest.approx(1.0), 2)
    rho, used = rowwise_spearman(x[:, :2], x[:, :2])  # 2 units per row: below the default gate of 3
    assert math.isnan(rho) and used == 0


def test_cost_closed_forms_at_exactly_the_exact_programs_tolerance():
    """Exponents ½ and 1 exactly and a relative gap of exactly exact_rel_tol = 1e-3 (≤: supported); at 5e-4 the
    programs miss and the exponents still order: partly, so the verdict depends on exact_rel_tol. Equal exponents
    do not order (partly needs sink < diagonal); a NaN exponent is not measurable."""
    verdict = cost_claims.cost_closed_forms_verdict("m", 0.5, 1.0, 1e-3)
    assert verdict.evidence == {
        "sink_exponent": 0.5,
        "diagonal_exponent": 1.0,
        "exact_rel_error": 1e-3,
        "interval_note": "closed forms and exact programs: no sampling interval",
    }
    assert verdict.thresholds == {"exponent_tol": 0.1, "exact_rel_tol": 1e-3}
    assert verdict.verdict == PARTLY
    assert verdict.reason == "depends on exact_rel_tol (exact_rel_tol: partly at 0.0005)"
    tie = cost_claims.cost_closed_forms_verdict("m", 0.8, 0.8, 1.0)
    assert tie.verdict == "not supported" and tie.reason == ""
    nan = cost_claims.cost_closed_forms_verdict("m", math.nan, 1.0, 0.0)
    assert nan.verdict == NOT_MEASURABLE and nan.reason == "not defined on this data: sink_exponent"


def test_weights_at_exactly_epsilon_and_rank_max():
    """Two layers of 3 sink heads (α 0.9; effective ranks 1.5, 2, 2.5: median exactly rank_max = 2, so ≤ holds) and
    3 other heads at α exactly ε = 0.3 (not a sink: α must exceed ε; ranks 4, 5, 6). Hand numbers: within each layer
    the difference is 2 − 5 = −3 and the pooled within-class sd is √((0.5 + 2) × 2 / 8) = √0.625, so the effect in
    the claimed direction (lower) is 3 / √0.625. At rank_max 1 the level fails (partly)."""
    values = [1.5, 2.0, 2.5, 4.0, 5.0, 6.0] * 2
    scores = [0.9, 0.9, 0.9, 0.3, 0.3, 0.3] * 2
    layers = [0] * 6 + [1] * 6
    verdict = weight_claims.weights_verdict("weights_low_rank", "m", values, scores, layers, head_dim=64)
    evidence = {
        name: verdict.evidence[name] for name in ("n_sink_heads", "n_other_heads", "layers_with_both")
    }
    assert evidence == {"n_sink_heads": 6, "n_other_heads": 6, "layers_with_both": 2}
    assert verdict.evidence["effect_within_layers"] == pytest.approx(3 / math.sqrt(0.625), rel=1e-12)
    assert verdict.evidence["median_sink_heads"] == 2.0 and verdict.evidence["median_other_heads"] == 5.0
    rank_max = [(r["scale"], r["verdict"]) for r in verdict.sensitivity if r["threshold"] == "rank_max"]
    assert rank_max == [(0.5, PARTLY), (2.0, "supported")]
    assert verdict.reason.endswith("fragile: partly at rank_max = 1")


def test_variant_arrays_read_back_one_claims_flat_names():
    """`CLAIM__THRESHOLD__SCALE__NAME` (four parts, the claim first) → {(threshold, float scale): {name: array}};
    another claim's, a three-part or five-part name is not read."""
    from sinkscope.reproduction.ablation_variants import variant_arrays

    arrays = {
        "sink_ablation__head_fraction__0.5__selected": [1.0, 2.0],
        "sink_ablation__sink_query_delta__2__random": [[3.0]],
        "sink_ablation__head_fraction__0.5__n_heads": 4,
        "dormant_heads__head_fraction__0.5__selected": [9.0],
        "sink_ablation__head_fraction__0.5": [9.0],
        "sink_ablation__head_fraction__0.5__selected__x": [9.0],
    }
    out = variant_arrays(arrays, "sink_ablation")
    assert sorted(out) == [("head_fraction", 0.5), ("sink_query_delta", 2.0)]
    assert sorted(out[("head_fraction", 0.5)]) == ["n_heads", "selected"]
    np.testing.assert_array_equal(out[("head_fraction", 0.5)]["selected"], [1.0, 2.0])
    assert int(out[("head_fraction", 0.5)]["n_heads"]) == 4 and out[("sink_query_delta", 2.0)][
        "random"
    ].shape == (1, 1)
    assert variant_arrays(arrays, "switch") == {}


def test_switch_and_its_routes_at_exactly_their_cuts():
    """switch: one head whose windows each hold 9 off·sink, 1 off·no sink, 1 on·sink of 80 queries at every δ, τ
    scale, its value drained (0.05 ≤ 0.1) in every window: both directions are 72 / 80 = 0.9 = 1 − miss_tol (≥:
    supported at the point; at miss_tol × ½, odds 0.0526, partly). Routes: 9 queries on BOS's route, 1 on
    another, 0 unexplained: the non-BOS share is exactly rare_tol = 0.1 (≤: supported); without a switched-off
    query nothing is defined."""
    heads = np.tile(np.array([9.0, 10.0, 10.0]), (W, 3, 3, 1, 1, 1))
    arrays = {"head_counts": heads, "head_drain": np.full((W, 1, 1), 0.05), "tau": np.array(0.1),
              "delta": np.array(0.1)}  # fmt: skip
    switch = switch_claims.switch_verdict("m", arrays, 80, 0.1)
    for direction in ("switch_implies_sink", "sink_implies_switch"):
        assert switch.evidence[direction]["estimate"] == 0.9
        assert "miss_tol: partly at 0.0526" in switch.evidence[direction]["reason"]
    assert switch.verdict == PARTLY and switch.interval["effect"] == "switch_implies_sink"
    routes = np.tile(np.array([9.0, 1.0, 0.0]), (W, 3, 3, 1))
    verdict = switch_claims.switch_routes_verdict(
        "m", routes, ["bos_sink", "other"], [True, False], extra={"T": 9}
    )
    assert verdict.evidence == {
        "routes": ["bos_sink", "other", "unexplained"],
        "T": 9,
        "non_bos_route_frac": 0.1,
        "non_bos_among_non_hard_sink": 1.0,
        "n_switched_off": 80.0,
        "frac_bos_sink": 0.9,
        "frac_other": 0.1,
        "frac_unexplained": 0.0,
    }
    assert verdict.verdict == PARTLY and verdict.reason == "depends on rare_tol (rare_tol: partly at 0.0526)"
    none = switch_claims.switch_routes_verdict("m", routes * 0, ["bos_sink", "other"], [True, False])
    assert none.verdict == NOT_MEASURABLE and none.reason == (
        "not defined on this data: non_bos_route_frac, non_bos_among_non_hard_sink, frac_bos_sink, frac_other, "
        "frac_unexplained"
    )


def test_mlp_like_is_described_whole():
    """Per window 2, 5 and 1 of 10 queries in layers 0–2: fractions 0.2, 0.5, 0.1 (max 0.5 at layer 1)."""
    verdict = switch_claims.mlp_like_verdict("m", np.tile([2.0, 5.0, 1.0], (W, 1)), queries=10)
    assert (verdict.claim, verdict.model, verdict.verdict, verdict.thresholds) == (
        "mlp_like",
        "m",
        "descriptive",
        {},
    )
    assert verdict.evidence == {
        "max_layer_frac": 0.5,
        "argmax_layer": 1.0,
        "mean_layer_frac": pytest.approx(0.8 / 3, rel=1e-12),
    }
    assert verdict.reason == "the paper states a condition, not a frequency: measured, not judged"
    assert verdict.interval["over"] == "windows" and verdict.interval["n"] == W


def test_cost_boundary_trained_with_its_control_at_exactly_control_min():
    """Two settings where the diagonal is predicted (both seeds diagonal) and two where the sink is (one setting
    forms the sink, the other a diagonal): every resample within settings keeps the control at exactly 2 / 4 = 0.5
    = control_min (not below: measurable) and the diagonal side at 1 (supported; at control_min 2/3 the control
    fails, which is not a verdict, so nothing depends on it)."""
    rows = [
        ("a", "diagonal", "diagonal"),
        ("b", "diagonal", "diagonal"),
        ("c", "sink", "sink"),
        ("d", "sink", "diagonal"),
    ]
    runs = pd.DataFrame(
        [
            {"setting": s, "seed": k, "predicted": p, "pattern": t, "steps": 100 + k}
            for s, p, t in rows
            for k in range(2)
        ]
    )
    verdict = experiment_claims.cost_boundary_trained_verdict(runs)
    assert verdict.evidence == {
        "runs": 8,
        "settings": 4,
        "steps": 101,
        "patterns_where_diagonal_predicted": "diagonal, diagonal, diagonal, diagonal",
        "patterns_where_sink_predicted": "sink, sink, diagonal, diagonal",
        "diagonal_side_match": 1.0,
        "sink_side_match": 0.5,
        "diagonal_side_sink_share": 0.0,
    }
    assert (verdict.claim, verdict.model, verdict.verdict, verdict.reason) == (
        "cost_boundary_trained",
        "synthetic",
        "supported",
        "",
    )
    assert verdict.thresholds == {"miss_tol": 0.1, "partly_min": 0.5, "control_min": 0.5}
    assert verdict.interval["over"] == "lab runs (seeds within settings) (within strata)"


def test_value_drain_at_exactly_its_hard_fraction_and_drain_cuts():
    """One layer of four KV groups of two query heads (so groups per layer, 4, differ from layers, 1), 10 queries
    per window, every window alike. Hard-sink counts per head (5, 0 | 1, 0 | 6, 0 | 2, 1): group fractions 0.5,
    0.1, 0.6, 0.2 (the largest head's); mean drains 0.5, 0.9, 0.5, 0.8. Sink groups are those with fraction ≥ 0.5
    exactly (groups 0 and 2), whose median drain is 0.5 = drain_max (≤: small). ρ from scipy's spearmanr, the same
    within the one layer (4 groups ≥ 3). Supported at the point; partly at drain_max 0.25 and at
    sink_head_hard_frac 2/3 (no sink group left)."""
    from scipy.stats import spearmanr

    hard = np.tile(np.array([[5.0, 0.0, 1.0, 0.0, 6.0, 0.0, 2.0, 1.0]]), (W, 1, 1))
    drains = np.tile(np.array([[0.5, 0.9, 0.5, 0.8]]), (W, 1, 1))
    verdict = switch_claims.value_drain_verdict("m", drains, hard, queries=10)
    rho = spearmanr([0.5, 0.1, 0.6, 0.2], [0.5, 0.9, 0.5, 0.8]).statistic
    assert verdict.evidence == {
        "n_groups": 4,
        "groups_per_layer": 4,
        "rho_all_groups": pytest.approx(rho, rel=1e-12),
        "rho_within_layers": pytest.approx(rho, rel=1e-12),
        "layers_within": 1.0,
        "n_sink_groups": 2.0,
        "median_drain_sink_groups": 0.5,
        "median_drain_other_groups": pytest.approx(0.85, rel=1e-12),
    }
    assert rho < -0.6 and verdict.verdict == PARTLY
    assert verdict.reason == (
        "depends on drain_max, sink_head_hard_frac (drain_max: partly at 0.25; sink_head_hard_frac: partly at 0.667)"
    )
    assert [r for r in verdict.sensitivity if r["threshold"] == "delta"][0]["not_varied"].startswith(
        "only δ × 1"
    )


def test_cost_boundary_at_exactly_one_minus_miss_tol():
    """18 draws of one (T, d, rank) cell where the boundary predicts the diagonal and the exact winner agrees, 2 of
    another where it predicts the sink and the winner disagrees, 3 undecided (left out): agreement 18 / 20 = 0.9 in
    every resample within cells; 9 of 10 vocabulary rows agree (0.9). Both ≥ 1 − miss_tol: supported; at miss_tol
    × ½ (odds: 0.0526) partly. Without vocabulary rows nothing is defined."""
    draw = {"T": 8, "d": 4, "rank": 2}
    geometry = pd.DataFrame(
        [draw | {"cheaper_predicted": "diagonal", "agree": True}] * 18
        + [draw | {"rank": 3, "cheaper_predicted": "sink", "agree": False}] * 2
        + [draw | {"T": 16, "cheaper_predicted": "undecided", "agree": False}] * 3
    )
    vocabulary = pd.DataFrame({"cheaper_closed": ["sink"] * 10, "cheaper_exact": ["sink"] * 9 + ["diagonal"]})
    verdict = experiment_claims.cost_boundary_verdict(vocabulary, geometry)
    assert verdict.evidence == {
        "vocabulary_rows": 10,
        "draws": 23,
        "undecided_draws": 3,
        "predicted_diagonal_draws": 18,
        "agreement": 0.9,
        "vocabulary_agreement": 0.9,
    }
    assert (verdict.claim, verdict.model, verdict.verdict) == ("cost_boundary", "theory", PARTLY)
    assert verdict.reason == "depends on miss_tol (miss_tol: partly at 0.0526)"
    assert verdict.thresholds == {"miss_tol": 0.1, "partly_min": 0.5}
    empty = experiment_claims.cost_boundary_verdict(vocabulary.iloc[:0], geometry)
    assert (
        empty.verdict == NOT_MEASURABLE and empty.reason == "not defined on this data: vocabulary_agreement"
    )


def test_switch_assumptions_record_with_a_value_spectrum_at_exactly_the_rank_tolerance():
    """Two layers, one KV head of 2 query heads, T − 1 = 3 context values in 4 dimensions, every window alike:
    layer 0's spectrum (1, 0.5, 1e-4) has its third value exactly at rank_rtol × the largest (>: not counted, so
    dependent), layer 1's (1, 0.5, 2e-4) is independent: share 0.5 = partly_min (≥: partly). Input space: rank 3
    of min(3, 16) and distance exactly 0.05 (≥: holds) in layer 0 only. Each query head: 10 off, 9 of them sinks."""
    spectrum = np.zeros((W, 2, 1, 3))
    spectrum[:, 0, 0], spectrum[:, 1, 0] = [1.0, 0.5, 1e-4], [1.0, 0.5, 2e-4]
    arrays = {"value_sv": spectrum, "heads": np.tile([9.0, 10.0, 12.0], (W, 2, 2, 1)),
              "distance": np.tile([0.05, 0.01], (W, 1)), "rank": np.full((W, 2), 3), "n_contexts": 3, "width": 16,
              "head_dim": 4}  # fmt: skip
    verdict = experiment_claims.assumptions_verdict("m", arrays)
    assert verdict.evidence == {
        "n_contexts": 3, "head_dim": 4, "width": 16, "min_distance": 0.05, "n_layers": 2, "kv_heads": 1,
        "independent_share": 0.5, "input_space_share": 0.5,
        "switch_implies_sink_where_independent": 0.9, "switch_implies_sink_where_dependent": 0.9,
    }  # fmt: skip
    assert (verdict.claim, verdict.verdict) == ("switch_assumptions", PARTLY)
    assert verdict.thresholds == {"rank_rtol": 1e-4, "miss_tol": 0.1, "partly_min": 0.5}


def test_representability_beats_exactly_the_beaten_control_fraction():
    """Four middle layers, each: H1 and H2 hold, BOS's γ₂/‖z‖ = 1, 20 controls of which 19 at 0.5 and the last at
    1.0 (a tie is not beaten: 19 / 20 = 0.95 = beaten_control_frac, ≥: beyond). BOS ranks 2nd (1 + one control ≥
    it). Supported at the point; at beaten_control_frac × 2 on the odds scale (38 / 39 = 0.974) no layer is beyond
    (partly, H1 and H2 hold); at n_controls 10 the first 10 controls are all beaten (supported)."""
    row = {"n_contexts": 30, "h1": True, "h2": 1, "gamma2_rel": 1.0, "control_gamma2_rel": [0.5] * 19 + [1.0]}
    verdict = geometry_claims.representability_verdict(
        "m", [row | {"layer": layer} for layer in (3, 4, 5, 6)], 16
    )
    assert verdict.evidence == {
        "n_contexts": 30,
        "width": 16,
        "n_controls": 20,
        "layers_ahead_of_control": 1.0,
        "layers": [3, 4, 5, 6],
        "bos_rank": [2, 2, 2, 2],
        "gamma2_rel_bos": [1.0] * 4,
        "gamma2_rel_control_median": [0.5] * 4,
        "gamma2_rel_control_max": [1.0] * 4,
        "layers_beyond_control": 1.0,
        "layers_representable": 1.0,
        "mean_controls_beaten": pytest.approx(0.95, rel=1e-12),
    }
    assert verdict.thresholds == {
        "failing_layer_tol": 0.2,
        "partly_layer_frac": 0.2,
        "beaten_control_frac": 0.95,
        "partly_beaten_frac": 0.5,
        "n_controls": 20.0,
    }
    assert verdict.verdict == PARTLY
    assert verdict.reason == "depends on beaten_control_frac (beaten_control_frac: partly at 0.974)"
    n_controls = [(r["scale"], r["verdict"]) for r in verdict.sensitivity if r["threshold"] == "n_controls"]
    assert n_controls == [(0.5, "supported"), (2.0, None)]


def test_an_ablation_measured_again_at_one_scale_only():
    """The head fraction re-measured at × 2 only (5 draws, no head count stored): it becomes a threshold of the
    sensitivity (0.1; at 0.2 the variant's ratio 0.4 / 1 decides: supported), × ½ is recorded as not varied with
    the fraction's reason, δ (never re-measured) stays not varied as a whole; the variant's point numbers are the
    evidence beside it. The verdict's own ratio 0.2 / 1 is supported at every varied threshold."""
    variant = {"selected": np.full(W, 0.4), "same_heads": np.ones((W, 5)), "random": np.full((W, 5), 2.0)}
    verdict = _ratio(0.2, 1.0, variants={("head_fraction", 2.0): variant})
    assert (verdict.verdict, verdict.reason) == ("supported", "")
    assert verdict.thresholds == {
        "supported_ratio": 0.5,
        "partly_ratio": 1.0,
        "n_draws": 20.0,
        "head_fraction": 0.1,
    }
    assert verdict.evidence["variants"] == {
        "head_fraction×2": {
            "ratio": 0.4,
            "delta_selected": 0.4,
            "selected_lowers_loss": 0.0,
            "ratio_same_heads": 0.4,
            "ratio_random": 0.2,
            "delta_same_heads_mean": 1.0,
            "delta_random_mean": 2.0,
            "n_heads": None,
            "draws": 5,
        }
    }
    records = [r for r in verdict.sensitivity if r["threshold"] in ("head_fraction", "sink_query_delta")]
    assert records == [
        {
            "threshold": "head_fraction",
            "scale": 0.5,
            "value": 0.05,
            "verdict": None,
            "not_varied": HEAD_FRACTION,
        },
        {"threshold": "head_fraction", "scale": 2.0, "value": 0.2, "verdict": "supported"},
        {"threshold": "sink_query_delta", "scale": None, "value": None, "verdict": None, "not_varied": DELTA},
    ]
    counted = _ratio(0.2, 1.0, variants={("head_fraction", 2.0): variant | {"n_heads": np.array(7)}})
    assert counted.evidence["variants"]["head_fraction×2"]["n_heads"] == 7
    half = _ratio(0.2, 1.0, variants={("head_fraction", 0.5): variant})  # × 2 missing: not varied at × 2
    records = [
        (r["scale"], r["verdict"], r.get("not_varied"))
        for r in half.sensitivity
        if r["threshold"] == "head_fraction"
    ]
    assert records == [(0.5, "supported", None), (2.0, None, HEAD_FRACTION)]


def test_the_within_layer_permutation_p_value_defaults_to_1000_seeded_permutations():
    """Two layers of four heads, two sinks each: the exact one-sided p-value over all 6 × 6 within-layer
    labellings (brute force, the stratified difference recomputed here by hand) against the default call, which
    is (1 + hits) / 1001 (1000 permutations) and the same as n_perm = 1000, seed = 0."""
    from itertools import combinations

    from sinkscope.reproduction.strata import within_layer_permutation_p

    values = np.array([3.0, 1.0, 2.5, 0.5, 2.0, 2.2, 0.1, 1.9])
    is_sink = np.array([True, True, False, False, True, True, False, False])
    layers = np.array([0, 0, 0, 0, 1, 1, 1, 1])

    def difference(
        sinks: tuple,
    ) -> float:  # equal class sizes: weights 1 per layer, the mean of the differences
        return float(np.mean([values[s].mean() - np.delete(values, s)[layers[np.delete(range(8), s)] == layer].mean()
                              for layer, s in zip((0, 1), sinks)]))  # fmt: skip

    observed = difference(([0, 1], [4, 5]))
    labellings = [
        ([*a], [4 + b for b in bb]) for a in combinations(range(4), 2) for bb in combinations(range(4), 2)
    ]
    exact = np.mean([difference(s) >= observed - 1e-12 for s in labellings])
    p = within_layer_permutation_p(values, is_sink, layers, greater=True)
    assert p == within_layer_permutation_p(values, is_sink, layers, greater=True, n_perm=1000, seed=0)
    assert p != within_layer_permutation_p(values, is_sink, layers, greater=True, seed=1)
    assert abs(p * 1001 - round(p * 1001)) < 1e-9 and abs(p - exact) < 0.05 and 0.05 < exact < 0.5


def test_the_stratified_difference_weighs_layers_by_their_class_sizes():
    """Layer 0: sinks 1, 3 and other 0 (difference 2, weight 2·1/3); layer 1: sink 5 and others 2, 4, 6
    (difference 1, weight 1·3/4); layer 2 holds sinks only (left out). Weighted: (4/3 + 3/4) / (17/12) = 25/17;
    pooled within-class sd √((2 + 8) / (1 + 2)) = √(10/3)."""
    from sinkscope.reproduction.strata import stratified_difference

    values = [1.0, 3.0, 0.0, 5.0, 2.0, 4.0, 6.0, 9.0, 9.0]
    is_sink = [True, True, False, True, False, False, False, True, True]
    layers = [0, 0, 0, 1, 1, 1, 1, 2, 2]
    difference, standardised, used = stratified_difference(values, is_sink, layers)
    assert difference == pytest.approx(25 / 17, rel=1e-12) and used == 2
    assert standardised == pytest.approx(25 / 17 / math.sqrt(10 / 3), rel=1e-12)
