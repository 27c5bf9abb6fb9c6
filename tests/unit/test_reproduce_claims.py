"""Verdicts of `sinkscope reproduce` on constructed numbers: every verdict of every claim is reachable, and the
interval cap and the threshold sensitivity of `reproduction.verdicts` do what docs/reproduction.md says."""

import json
import math

import numpy as np
import pytest

from sinkscope.reproduction import verdicts as v
from sinkscope.reproduction.ablation_claims import (
    ABLATION,
    dormant_curve,
    dormant_heads_verdict,
    sink_ablation_verdict,
)
from sinkscope.reproduction.claim_texts import CLAIMS, with_claim_text
from sinkscope.reproduction.cost_claims import (
    COST_CLOSED,
    COST_REAL,
    cost_closed_forms_verdict,
    cost_real_verdict,
)
from sinkscope.reproduction.experiment_claims import THRESHOLDS as EXPERIMENT_THRESHOLDS
from sinkscope.reproduction.geometry_claims import (
    GEOMETRY,
    REPRESENTABILITY,
    geometry_verdict,
    representability_verdict,
)
from sinkscope.reproduction.regime_claims import REGIMES, regimes_verdict
from sinkscope.reproduction.sink_rate_claims import GU, gu_sink_rate_verdict
from sinkscope.reproduction.smoothing_claims import OVERSMOOTHING, oversmoothing_verdict
from sinkscope.reproduction.strata import middle_layers
from sinkscope.reproduction.switch_claims import (
    ROUTE_CLAIM,
    SWITCH,
    VALUE_DRAIN,
    mlp_like_verdict,
    switch_routes_verdict,
    switch_verdict,
    value_drain_verdict,
)
from sinkscope.reproduction.weight_claims import WEIGHTS_ALIGNMENT, WEIGHTS_LOW_RANK, weights_verdict

M = "m"
S, P, N, NM, D = v.SUPPORTED, v.PARTLY, v.NOT_SUPPORTED, v.NOT_MEASURABLE, v.DESCRIPTIVE


def verdicts(*results):
    return [r.verdict for r in results]


# --- the framework ---------------------------------------------------------------------------------------------


def test_graded_and_capped():
    assert [v.graded(x, 0.8, 0.2) for x in (0.9, 0.5, 0.1, math.nan)] == [S, P, N, NM]
    assert [v.graded(x, 0.5, 1.0, higher_is_better=False) for x in (0.4, 0.9, 1.5)] == [S, P, N]
    assert v.capped(S, [S] * 100) == (S, "")
    verdict, reason = v.capped(S, [S] * 90 + [P] * 10)  # 10 % partly: the 2.5 % quantile is partly
    assert verdict == P and "partly … supported" in reason
    assert v.capped(N, [S] * 50 + [N] * 50)[0] == NM
    assert v.capped(S, [S] * 99 + [N])[0] == S  # 1 % outliers stay inside the 95 % range


def test_interval_is_the_percentile_bootstrap_over_units():
    values = np.random.default_rng(3).normal(1.0, 0.5, 40)
    result = v.judge("x", M, {"values": values}, lambda u, th: {"mean": float(u["values"].mean())},
                     lambda e, th: v.graded(e["mean"], th["cut"], 0.0), {"cut": 0.2}, over="windows", min_units=8,
                     seed=7)  # fmt: skip
    means = [values[idx].mean() for idx in v.bootstrap_indices(40, v.N_BOOT, 7)]
    low, high = np.percentile(means, [2.5, 97.5])
    assert result.interval["estimate"] == pytest.approx(values.mean())
    assert (result.interval["low"], result.interval["high"]) == pytest.approx((low, high))
    assert result.interval["over"] == "windows" and result.interval["n"] == 40 and result.verdict == S
    # Sensitivity: one record per threshold and scale; cut 0.4 and 0.1 keep the verdict.
    assert [(r["threshold"], r["scale"], r["verdict"]) for r in result.sensitivity] == [("cut", 0.5, S), ("cut", 2, S)]


def test_a_verdict_is_never_stronger_than_its_interval():
    rng = np.random.default_rng(0)

    def run(values):
        return v.judge("x", M, {"values": values}, lambda u, th: {"mean": float(u["values"].mean())},
                       lambda e, th: v.graded(e["mean"], 1.0, 0.0), {}, over="windows", min_units=3)  # fmt: skip

    assert run(rng.normal(3.0, 0.1, 30)).verdict == S
    wide = run(np.array([-5.0, 5.0, 6.0]))  # mean 2 (supported), but resamples reach far below 0
    assert wide.verdict == NM and "too little data" in wide.reason
    one_step = run(np.array([0.8, 1.25] * 15))  # mean 1.025, s.e. 0.04: partly … supported
    assert one_step.verdict == P and "bootstrap range" in one_step.reason


def test_a_verdict_that_depends_on_a_threshold_says_so():
    def run(cut):
        return v.judge("x", M, {"values": np.full(20, 1.0)}, lambda u, th: {"mean": float(u["values"].mean())},
                       lambda e, th: v.graded(e["mean"], th["cut"], 0.0), {"cut": cut}, over="windows", min_units=8)

    assert run(0.4).verdict == S  # 0.2 and 0.8 still below 1
    moved = run(0.7)  # doubled, 1.4 > 1: partly at double the cut
    assert moved.verdict == P and moved.reason.startswith("depends on cut") and "partly at 1.4" in moved.reason
    assert [r["verdict"] for r in moved.sensitivity] == [S, P]


def test_descriptive_and_exact_claims():
    desc = v.judge("x", M, {"values": np.arange(5.0)}, lambda u, th: {"max": float(u["values"].max())},
                   lambda e, th: S, {}, over="windows", min_units=2, descriptive=True)
    assert desc.verdict == D and desc.interval["estimate"] == 4.0 and desc.sensitivity == []
    exact = v.judge("x", M, {}, lambda u, th: {"e": 0.5}, lambda e, th: v.graded(e["e"], th["cut"], 0.1),
                    {"cut": 0.4}, over="closed form")
    assert exact.interval is None and exact.evidence["interval_note"] == "closed form" and exact.verdict == P
    assert "depends on cut" in exact.reason  # at 0.2 it would be supported


def test_records_are_json_ready_and_carry_the_claim_text():
    record = with_claim_text(switch_verdict(M, head_arrays([[0, 0, 0]], [1.0]), 15, 0.1).to_dict())
    assert json.loads(json.dumps(record)) == record
    assert {"paper_claim", "test", "why_strongest", "control", "table", "interval", "sensitivity"} <= set(record)
    with pytest.raises(ValueError):
        v.Verdict("switch", M, "maybe")


# --- every claim: each verdict reachable -------------------------------------------------------------------------


def test_middle_layers():
    assert middle_layers(9) == [2, 3, 4, 5, 6]
    assert middle_layers(1) == [0]
    assert middle_layers(2) == [1]  # fallback when no layer lies in [1/4, 3/4] of depth


def test_geometry():
    W, L, tokens = 8, 9, 10  # middle layers 2..6
    full, none = np.full((W, L), tokens), np.zeros((W, L))
    some = np.zeros((W, L))
    some[:, [2, 3]] = tokens  # 2 of 5 middle layers hold

    def run(z, h, control=none):
        return geometry_verdict(M, {"z": z, "z_control": control, "h": h, "h_control": none}, tokens)

    result = run(full, full)
    assert result.verdict == S and result.evidence["control_layers_holding_z"] == 0.0
    # h alone holding is partly; a layer where the random token holds too does not count (z here)
    assert verdicts(run(some, some), run(full, none), run(none, none), run(full, full, control=full)) == [P, P, N, P]
    assert geometry_verdict(M, {}, tokens).verdict == NM
    # The middle band is a threshold: holding layers 1..3 only is supported at a band of depth 0.1 … 0.4? no —
    # the band moves with middle_margin, and the sensitivity records it.
    assert {r["threshold"] for r in result.sensitivity} >= {"middle_margin"}


def test_representability():
    def layers(h2, bos, n=100, controls=20, count=5):
        return [{"layer": i, "n_contexts": n, "h1": True, "h2": h2, "gamma2_rel": bos,
                 "control_gamma2_rel": list(np.linspace(0.1, 0.3, controls))} for i in range(count)]  # fmt: skip

    result = representability_verdict(M, layers(True, 0.5), width=10)
    assert result.verdict == S and result.evidence["bos_rank"] == [1] * 5
    assert verdicts(
        representability_verdict(M, layers(True, 0.25), width=10),  # ahead of 15 of 20 controls, not 95 %
        representability_verdict(M, layers(True, 0.2), width=10),  # passes, but no better than random tokens
        representability_verdict(M, layers(False, 0.0), width=10),
        representability_verdict(M, layers(True, 0.5, n=10), width=10),
        representability_verdict(M, layers(True, 0.5, controls=3), width=10),
        representability_verdict(M, layers(True, 0.5, count=3), width=10),
        representability_verdict(M, [], width=10),
    ) == [P, N, N, NM, NM, NM, NM]
    assert "not larger than the model width" in representability_verdict(M, layers(True, 1, n=8), 10).reason
    assert representability_verdict(M, layers(True, 0.5, controls=3), 10).reason.startswith("too few control")


def test_oversmoothing():
    layers = np.repeat(np.arange(5), 10)
    rise, flat = np.full(50, 0.1), np.zeros(50)
    tenth = np.where(np.arange(50) % 10 == 0, 0.1, 0.0)
    dense = np.ones(50, bool)
    result = oversmoothing_verdict(M, rise, dense, layers)
    assert result.verdict == S and result.interval["over"] == "heads (within strata)"
    assert verdicts(
        oversmoothing_verdict(M, np.where(np.arange(50) % 10 < 6, 0.1, 0.0), dense, layers),
        oversmoothing_verdict(M, tenth, dense, layers),
        oversmoothing_verdict(M, flat, dense, layers),  # the predictor says "smooths": it does not decide
        oversmoothing_verdict(M, rise[:5], dense[:5], layers[:5]),
    ) == [P, N, N, NM]


def head_arrays(heads, drains, W=8, at_tau2=None):
    """The switch section's per-head arrays: every window holds, per head, the counts (off ∧ sink, off, sink) of
    `heads` at every δ and τ scale (at τ × 2 those of `at_tau2` when given) and the drains `drains`."""
    counts = np.zeros((W, 3, 3, 1, len(heads), 3))
    counts[..., :, :] = np.asarray(heads, float)
    if at_tau2 is not None:
        counts[:, :, 2] = np.asarray(at_tau2, float)
    return {"head_counts": counts, "head_drain": np.tile(np.asarray(drains, float), (W, 1, 1)),
            "tau": np.array(0.1), "delta": np.array(0.1)}


def test_switch():
    # Head 0 a hard switch (every query off and a sink, v_0 drained), head 1 a sink whose value does not drain.
    theorem = switch_verdict(M, head_arrays([[15, 15, 15], [0, 0, 15]], [0.0, 2.0]), 15, 0.1)
    assert theorem.verdict == S and theorem.evidence["sink_implies_switch_undrained"] == 0.0  # no prediction there
    assert (theorem.evidence["n_sink_heads"], theorem.evidence["n_sink_heads_hard_switch"]) == (2, 1)
    parts = [switch_verdict(M, head_arrays(heads, drains), 15, 0.1) for heads, drains in (
        ([[0, 15, 0], [15, 15, 15]], [0.0, 0.0]),  # one head off without a sink: switch ⇒ sink 0.5
        ([[0, 15, 0], [0, 0, 15]], [0.0, 0.0]),  # each direction broken: 0 and 0
        ([[0, 0, 15]], [2.0]))]  # no head switches off, no sink drains  # fmt: skip
    assert verdicts(*parts) == [P, N, NM]
    assert [parts[0].evidence[d]["verdict"] for d in ("switch_implies_sink", "sink_implies_switch")] == [P, S]
    assert [parts[1].evidence[d]["verdict"] for d in ("switch_implies_sink", "sink_implies_switch")] == [N, N]
    # The τ axis: at τ × 2 head 1's sinks switch off too; the word stays partly, the variant is recorded.
    moved = switch_verdict(M, head_arrays([[0, 0, 15], [0, 15, 0]], [0.0, 0.0], at_tau2=[[15, 15, 15], [0, 15, 0]]),
                           15, 0.1)  # fmt: skip
    records = {(r["threshold"], r["scale"]): r["verdict"] for r in moved.sensitivity}
    assert moved.verdict == N and records[("tau", 2.0)] == P  # the variant reads partly: recorded, never adopted


def test_switch_routes():
    names, sinks = ["bos_sink", "cancellation", "bos_partial", "self", "low"], [True, False, True, False, False]

    def counts(row, W=8):
        out = np.zeros((W, 3, 3, 6))
        out[...] = row
        return out

    result = switch_routes_verdict(M, counts([95, 2, 3, 0, 0, 0]), names, sinks)
    assert result.verdict == S and result.evidence["non_bos_route_frac"] == pytest.approx(0.02)
    assert result.evidence["non_bos_among_non_hard_sink"] == pytest.approx(0.4)
    assert verdicts(
        switch_routes_verdict(M, counts([60, 20, 0, 20, 0, 0]), names, sinks),
        switch_routes_verdict(M, counts([10, 60, 0, 20, 10, 0]), names, sinks),
        switch_routes_verdict(M, counts([0, 0, 0, 0, 0, 0]), names, sinks),
    ) == [P, N, NM]


def test_value_drain_by_rank_correlation():
    W, L, KV, H = 8, 4, 3, 6
    rng = np.random.default_rng(0)
    hard = np.zeros((W, L, H))
    hard[:, :, 0] = 60

    def drains(sink, other):
        out = np.full((W, L, KV), other) + rng.normal(0, 0.01, (W, L, KV))
        out[:, :, 0] = sink
        return out

    result = value_drain_verdict(M, drains(0.1, 1.0), hard, 63)
    assert result.verdict == S and result.evidence["rho_all_groups"] < -0.5
    assert result.evidence["median_drain_sink_groups"] == pytest.approx(0.1)
    assert verdicts(
        value_drain_verdict(M, drains(0.8, 1.0), hard, 63),  # ranks agree, drain not small
        value_drain_verdict(M, drains(1.5, 1.0), hard, 63),
        value_drain_verdict(M, drains(0.1, 1.0), np.zeros((W, L, H)), 63),  # no head sinks: no spread
    ) == [P, N, NM]
    # Simpson for drains: across layers sinking goes with small drains, within every layer the opposite.
    level, k = np.arange(L)[:, None], np.arange(KV)[None, :]
    frac = 0.3 * level + 0.02 * k  # (L, KV); the sink groups' drains stay ≤ 0.25 at every threshold scale
    within = np.zeros((W, L, H))
    within[:, :, ::2] = np.round(frac * 63)
    drain = np.broadcast_to(0.8 - 0.25 * level + 0.02 * k, (W, L, KV)) + rng.normal(0, 1e-3, (W, L, KV))
    simpson = value_drain_verdict(M, drain, within, 63)
    assert simpson.evidence["rho_all_groups"] < -0.5 and simpson.evidence["rho_within_layers"] > 0.9
    assert simpson.verdict == P
    # One KV group per layer (Gemma-3): no within-layer correlation, still measurable.
    single = value_drain_verdict(M, drains(0.1, 1.0)[:, :, :1] * np.arange(L, 0, -1)[None, :, None],
                                 np.repeat(np.arange(L)[None, :, None] * 10.0, W, 0), 63)  # fmt: skip
    assert single.verdict == P and math.isnan(single.evidence["rho_within_layers"])


def test_mlp_like_is_descriptive():
    result = mlp_like_verdict(M, np.array([[1.0, 5.0]] * 8), queries=10)
    assert result.verdict == D and result.evidence["max_layer_frac"] == 0.5 and result.interval["estimate"] == 0.5
    assert mlp_like_verdict(M, np.zeros((0, 0)), 10).verdict == NM


def test_sink_ablation_against_both_controls():
    rng = np.random.default_rng(0)
    W, D = 8, 20
    control = 1 + rng.normal(0, 0.05, (W, D))
    result = sink_ablation_verdict(M, np.full(W, 0.1), control, control * 2)
    assert result.verdict == S and result.evidence["ratio_same_heads"] == pytest.approx(0.1, rel=0.05)
    assert result.interval["over"] == "windows × draws"
    assert verdicts(
        sink_ablation_verdict(M, np.full(W, 0.7), control, control * 5),  # the larger ratio decides
        sink_ablation_verdict(M, np.full(W, 3.0), control, control),
        sink_ablation_verdict(M, np.full(W, 0.1), -control, control),  # the same-heads control lowers the loss
    ) == [P, N, NM]


def test_dormant_ablation():
    rng = np.random.default_rng(0)
    W, D = 8, 20
    control = 1 + rng.normal(0, 0.05, (W, D))
    assert verdicts(
        dormant_heads_verdict(M, np.full(W, 0.1), control, control),
        dormant_heads_verdict(M, np.full(W, 0.75), control, control),
        dormant_heads_verdict(M, np.full(W, 3.0), control, control),
        dormant_heads_verdict(M, np.full(W, 0.1), -control, control),  # the layer-matched sets lower the loss
        dormant_heads_verdict(M, np.full(W, 0.1), control[:, :8], control[:, :8]),  # too few draws
    ) == [S, P, N, NM, NM]
    assert dormant_heads_verdict(M, np.full(W, 0.1), control, control).interval["over"] == "windows × draws"


def test_dormant_curve():
    curve = dormant_curve([0.05, 0.15, 0.45, 0.9, math.nan])
    assert curve["0.1"] == 0.25 and curve["0.5"] == 0.75 and curve["0.8"] == 0.75


def test_cost_claims():
    assert verdicts(
        cost_closed_forms_verdict(M, 0.5, 1.0, 1e-9),
        cost_closed_forms_verdict(M, 0.7, 1.0, 1e-9),
        cost_closed_forms_verdict(M, 1.0, 0.5, 1e-9),
        cost_closed_forms_verdict(M, math.nan, 1.0, 0.0),
    ) == [S, P, N, NM]
    Ts = [8, 16, 32]
    assert verdicts(
        cost_real_verdict(M, np.ones((8, 3)), Ts),
        cost_real_verdict(M, np.tile([1.0, 1.0, 0.0], (8, 1)), Ts),  # one T loses everywhere
        cost_real_verdict(M, np.zeros((8, 3)), Ts),
        cost_real_verdict(M, np.zeros((0, 0)), Ts),
        cost_real_verdict(M, np.ones((7, 3)), Ts),  # too few windows (8 needed)
    ) == [S, P, N, NM, NM]


def test_regimes_as_the_paper_states_them():
    def cell(bos, diag):
        return {"bos_mass": bos, "diag_mass": diag, "pattern": "x", "agreement": "3/3"}

    both = {"gpt2": (cell(0.98, 0.0), cell(0.0, 0.1)), "pytorch": (cell(0.9, 0.0), cell(0.0, 0.9))}
    mixed = {"gpt2": (cell(0.98, 0.0), cell(0.0, 0.1)), "pytorch": (cell(0.37, 0.6), cell(0.0, 0.9))}
    none = {"gpt2": (cell(0.1, 0.0), cell(0.0, 0.1))}
    partly = regimes_verdict(M, mixed)
    assert partly.verdict == P and partly.reason.startswith("init-dependent: a sink with BOS at gpt2 only")
    assert verdicts(regimes_verdict(M, both), regimes_verdict(M, none), regimes_verdict(M, None, "no map")) == [
        S, N, NM]


def test_weights_within_layers():
    rng = np.random.default_rng(0)
    layers = np.repeat(np.arange(4), 10)
    sink = np.tile(np.r_[np.ones(5), np.zeros(5)], 4).astype(bool)

    def values(sink_value, other_value):
        return np.where(sink, sink_value, other_value) + rng.normal(0, 0.05, 40)

    def run(claim, data, flags=sink, head_dim=128):
        return weights_verdict(claim, M, data, flags, layers, head_dim=head_dim)

    assert verdicts(
        run("weights_low_rank", values(0.9, 4.0)),  # lower within layers and within rank_max × ½ of rank 1
        run("weights_low_rank", values(50.0, 55.0)),  # lower, far from rank 1, at most half of 128
        run("weights_low_rank", values(50.0, 55.0), head_dim=64),  # lower, but above half the head dimension
        run("weights_low_rank", values(55.0, 50.0)),
        run("weights_bos_alignment", values(0.9, 0.1)),
        run("weights_bos_alignment", values(0.1, 0.05)),  # higher, far from a rank-1 reading
        run("weights_bos_alignment", values(0.9, 0.1), flags=layers < 2),  # no layer holds both classes
    ) == [S, P, N, N, S, P, NM]
    assert run("weights_low_rank", values(0.9, 4.0)).evidence["p_value_within_layers"] < 0.01


def test_gu_sink_rate():
    W, L, H = 8, 2, 2
    high, low = np.full((W, L, H), 0.9), np.full((W, L, H), 0.01)
    assert verdicts(
        gu_sink_rate_verdict(M, {"natural": high, "random": high, "repeat": high}),
        gu_sink_rate_verdict(M, {"natural": high, "random": low, "repeat": high}),
        gu_sink_rate_verdict(M, {"natural": low, "random": low, "repeat": low}),
        gu_sink_rate_verdict(M, {"natural": high}),
    ) == [S, P, N, NM]


def test_the_docs_list_every_threshold_of_every_claim():
    """docs/reproduction.md's claims table names, per claim, every threshold the judge varies."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "reproduction.md").read_text()
    rows = {line.split("|")[2].strip().strip("`"): line for line in text.splitlines() if line.startswith("| ")}
    thresholds = {"geometry": GEOMETRY, "representability": REPRESENTABILITY, "oversmoothing": OVERSMOOTHING,
                  "switch": SWITCH, "switch_routes": ROUTE_CLAIM, "value_drain": VALUE_DRAIN,
                  "sink_ablation": ABLATION, "dormant_heads": ABLATION, "cost_closed_forms": COST_CLOSED,
                  "cost_real_layers": COST_REAL, "bigram_backcopy_regimes": REGIMES,
                  "weights_low_rank": WEIGHTS_LOW_RANK, "weights_bos_alignment": WEIGHTS_ALIGNMENT,
                  "gu_sink_rate": GU, **EXPERIMENT_THRESHOLDS}  # fmt: skip
    assert set(thresholds) == set(CLAIMS) - {"mlp_like"}
    for claim, names in thresholds.items():
        for name in names:
            assert f"`{name}`" in rows[claim], (claim, name)
