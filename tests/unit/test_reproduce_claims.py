"""Verdicts of `sinkscope reproduce` on constructed numbers: every verdict of every claim is reachable, and the
interval cap and the threshold sensitivity of `reproduction.verdicts` do what docs/reproduction.md says."""

import json
import math

import numpy as np
import pytest

from sinkscope.reproduction import claims as c
from sinkscope.reproduction import verdicts as v

M = "m"
S, P, N, NM, D = c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE, c.DESCRIPTIVE


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
    assert v.capped(S, [NM] * 10 + [S] * 90) == (S, "")  # resamples where the effect does not exist are left out


def test_interval_is_the_percentile_bootstrap_over_units():
    values = np.random.default_rng(3).normal(1.0, 0.5, 40)
    result = v.judge("x", M, {"values": values}, lambda u, th: {"mean": float(u["values"].mean())},
                     lambda e, th: v.graded(e["mean"], th["cut"], 0.0), {"cut": 0.2}, over="windows", seed=7)
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
                       lambda e, th: v.graded(e["mean"], 1.0, 0.0), {}, over="windows")

    assert run(rng.normal(3.0, 0.1, 30)).verdict == S
    wide = run(np.array([-5.0, 5.0, 6.0]))  # mean 2 (supported), but resamples reach far below 0
    assert wide.verdict == NM and "too little data" in wide.reason
    one_step = run(np.array([0.8, 1.25] * 15))  # mean 1.025, s.e. 0.04: partly … supported
    assert one_step.verdict == P and "bootstrap range" in one_step.reason
    few = run(np.array([1.0]))
    assert few.verdict == NM and "only 1 windows" in few.reason


def test_a_verdict_that_depends_on_a_threshold_says_so():
    def run(cut):
        return v.judge("x", M, {"values": np.full(20, 1.0)}, lambda u, th: {"mean": float(u["values"].mean())},
                       lambda e, th: v.graded(e["mean"], th["cut"], 0.0), {"cut": cut}, over="windows")

    assert run(0.4).verdict == S  # 0.2 and 0.8 still below 1
    moved = run(0.7)  # doubled, 1.4 > 1: partly at double the cut
    assert moved.verdict == P and moved.reason.startswith("depends on cut") and "partly at 1.4" in moved.reason
    assert [r["verdict"] for r in moved.sensitivity] == [S, P]


def test_descriptive_and_exact_claims():
    desc = v.judge("x", M, {"values": np.arange(5.0)}, lambda u, th: {"max": float(u["values"].max())},
                   lambda e, th: S, {}, over="windows", descriptive=True)
    assert desc.verdict == D and desc.interval["estimate"] == 4.0 and desc.sensitivity == []
    exact = v.judge("x", M, {}, lambda u, th: {"e": 0.5}, lambda e, th: v.graded(e["e"], th["cut"], 0.1),
                    {"cut": 0.4}, over="closed form")
    assert exact.interval is None and exact.evidence["interval_note"] == "closed form" and exact.verdict == P
    assert "depends on cut" in exact.reason  # at 0.2 it would be supported


def test_records_are_json_ready_and_carry_the_claim_text():
    record = c.with_claim_text(c.switch_verdict(M, np.zeros((4, 3, 3, 4))).to_dict())
    assert json.loads(json.dumps(record)) == record
    assert {"paper_claim", "test", "why_strongest", "control", "table", "interval", "sensitivity"} <= set(record)
    with pytest.raises(ValueError):
        v.Verdict("switch", M, "maybe")


# --- every claim: each verdict reachable -------------------------------------------------------------------------


def test_middle_layers():
    assert c.middle_layers(9) == [2, 3, 4, 5, 6]
    assert c.middle_layers(1) == [0]
    assert c.middle_layers(2) == [1]  # fallback when no layer lies in [1/4, 3/4] of depth


def test_geometry():
    W, L, tokens = 6, 9, 10  # middle layers 2..6
    full, none = np.full((W, L), tokens), np.zeros((W, L))
    some = np.zeros((W, L))
    some[:, [2, 3]] = tokens  # 2 of 5 middle layers hold
    result = c.geometry_verdict(M, full, none, tokens)
    assert result.verdict == S and result.evidence["control_layers_holding"] == 0.0
    assert verdicts(c.geometry_verdict(M, some, none, tokens), c.geometry_verdict(M, none, none, tokens),
                    c.geometry_verdict(M, np.zeros((W, 0)), none, tokens)) == [P, N, NM]


def test_representability():
    def layers(h2, gamma2, control, n=100):
        return [{"layer": i, "n_contexts": n, "h1": True, "h2": h2, "gamma2": gamma2, "control_gamma2_max": control}
                for i in range(5)]

    assert verdicts(
        c.representability_verdict(M, layers(True, 0.5, 0.1), width=10),
        c.representability_verdict(M, layers(True, 0.05, 0.1), width=10),  # passes, but no better than random tokens
        c.representability_verdict(M, layers(False, 0.0, 0.1), width=10),
        c.representability_verdict(M, layers(True, 0.5, 0.1, n=10), width=10),
        c.representability_verdict(M, [], width=10),
    ) == [S, P, N, NM, NM]
    assert "not larger than the model width" in c.representability_verdict(M, layers(True, 1, 0, n=8), 10).reason


def test_oversmoothing():
    ones, zeros = np.ones(50, bool), np.zeros(50, bool)
    tenth = np.arange(50) < 5
    assert verdicts(
        c.oversmoothing_verdict(M, ones, ones),
        c.oversmoothing_verdict(M, zeros, ones),
        c.oversmoothing_verdict(M, tenth, tenth),
        c.oversmoothing_verdict(M, [], []),
    ) == [S, P, N, NM]


def switch_counts(off_sink, off_nosink, on_sink, on_nosink, W=5):
    return np.tile(np.array([off_sink, off_nosink, on_sink, on_nosink], float), (W, 3, 3, 1))


def test_switch():
    result = c.switch_verdict(M, switch_counts(10, 0, 0, 20))
    assert result.verdict == S and result.evidence["p_sink_given_off"] == 1.0
    assert result.evidence["p_off_given_nosink"] == 0.0  # the control row
    assert verdicts(
        c.switch_verdict(M, switch_counts(6, 4, 6, 20)),
        c.switch_verdict(M, switch_counts(1, 9, 9, 20)),
        c.switch_verdict(M, switch_counts(0, 0, 5, 10)),
    ) == [P, N, NM]
    # The δ axis: at twice δ every switched-off query is a hard sink and vice versa; at δ it is not.
    counts = switch_counts(1, 9, 9, 20)
    counts[:, 2] = [10, 0, 0, 20]
    moved = c.switch_verdict(M, counts)
    assert moved.verdict == P and "depends on delta" in moved.reason
    assert {(r["threshold"], r["scale"]): r["verdict"] for r in moved.sensitivity}[("delta", 2.0)] == S
    # One δ pass (--quick): the same verdict from the δ × 1 tables, δ itself not varied.
    single = c.switch_verdict(M, switch_counts(10, 0, 0, 20)[:, 1:2])
    assert single.verdict == S and "delta" not in {r["threshold"] for r in single.sensitivity}


def test_value_drain_between_kv_groups():
    W = 6
    hard = np.array([0.9] * 4 + [0.0] * 4)

    def drains(sink, other):
        return np.tile(np.array([sink] * 4 + [other] * 4, float), (W, 1))

    result = c.value_drain_verdict(M, drains(0.1, 1.0), hard)
    assert result.verdict == S and result.evidence["p_value"] < 0.05 and result.evidence["median_sink_groups"] == pytest.approx(0.1)
    assert verdicts(
        c.value_drain_verdict(M, drains(0.8, 1.0), hard),
        c.value_drain_verdict(M, drains(1.5, 1.0), hard),
        c.value_drain_verdict(M, drains(0.1, 1.0), np.array([0.9] + [0.0] * 7)),  # one sink group: no test
    ) == [P, N, NM]


def test_mlp_like_is_descriptive():
    result = c.mlp_like_verdict(M, np.array([[1.0, 5.0]] * 4), queries=10)
    assert result.verdict == D and result.evidence["max_layer_frac"] == 0.5 and result.interval["estimate"] == 0.5
    assert c.mlp_like_verdict(M, np.zeros((0, 0)), 10).verdict == NM


def test_ablation():
    randoms = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0]
    assert verdicts(
        c.ablation_verdict("sink_ablation", M, 0.1, randoms),
        c.ablation_verdict("sink_ablation", M, 0.75, randoms),
        c.ablation_verdict("sink_ablation", M, 3.0, randoms),
        c.ablation_verdict("sink_ablation", M, 0.1, [-0.1, -0.2]),
        c.ablation_verdict("sink_ablation", M, 0.5, [0.1, 5.0]),  # two draws far apart: noise decides
    ) == [S, P, N, NM, NM]
    assert c.ablation_verdict("dormant_heads", M, 0.1, randoms).interval["over"] == "random draws"


def test_dormant_curve():
    curve = c.dormant_curve([0.05, 0.15, 0.45, 0.9, math.nan])
    assert curve["0.1"] == 0.25 and curve["0.5"] == 0.75 and curve["0.8"] == 0.75


def test_cost_claims():
    assert verdicts(
        c.cost_closed_forms_verdict(M, 0.5, 1.0, 1e-9),
        c.cost_closed_forms_verdict(M, 0.7, 1.0, 1e-9),
        c.cost_closed_forms_verdict(M, 1.0, 0.5, 1e-9),
        c.cost_closed_forms_verdict(M, math.nan, 1.0, 0.0),
    ) == [S, P, N, NM]
    n = 200
    assert verdicts(
        c.cost_real_verdict(M, [1.0] * n, [10.0] * n),
        c.cost_real_verdict(M, [1.0] * n, [10.0] * 130 + [0.5] * 70),
        c.cost_real_verdict(M, [1.0] * n, [0.5] * n),
        c.cost_real_verdict(M, [math.inf] * n, [math.inf] * n),
    ) == [S, P, N, NM]


def test_regimes_as_the_paper_states_them():
    def cell(bos, diag):
        return {"bos_mass": bos, "diag_mass": diag, "pattern": "x", "agreement": "3/3"}

    both = {"gpt2": (cell(0.98, 0.0), cell(0.0, 0.1)), "pytorch": (cell(0.9, 0.0), cell(0.0, 0.9))}
    mixed = {"gpt2": (cell(0.98, 0.0), cell(0.0, 0.1)), "pytorch": (cell(0.37, 0.6), cell(0.0, 0.9))}
    none = {"gpt2": (cell(0.1, 0.0), cell(0.0, 0.1))}
    partly = c.regimes_verdict(M, mixed)
    assert partly.verdict == P and partly.reason.startswith("init-dependent: a sink with BOS at gpt2 only")
    assert verdicts(c.regimes_verdict(M, both), c.regimes_verdict(M, none), c.regimes_verdict(M, None, "no map")) == [
        S, N, NM]


def test_weights():
    rng = np.random.default_rng(0)
    low, high = rng.normal(1, 0.1, 20), rng.normal(2, 0.1, 20)
    assert verdicts(
        c.weights_verdict("weights_low_rank", M, low, high, sink_lower=True),
        c.weights_verdict("weights_low_rank", M, high - 0.01, high, sink_lower=True),  # ordered, not significant
        c.weights_verdict("weights_bos_alignment", M, low, high, sink_lower=False),
        c.weights_verdict("weights_bos_alignment", M, [1.0, 2.0], high, sink_lower=False),
    ) == [S, P, N, NM]


def test_gu_sink_rate():
    W, L, H = 8, 2, 2
    high, low = np.full((W, L, H), 0.9), np.full((W, L, H), 0.01)
    assert verdicts(
        c.gu_sink_rate_verdict(M, {"natural": high, "random": high, "repeat": high}),
        c.gu_sink_rate_verdict(M, {"natural": high, "random": low, "repeat": high[:2]}),
        c.gu_sink_rate_verdict(M, {"natural": low, "random": low, "repeat": low}),
        c.gu_sink_rate_verdict(M, {"natural": high}),
    ) == [S, P, N, NM]
