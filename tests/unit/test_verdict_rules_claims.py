"""Every claim can fail, and every threshold a decision reads is varied or recorded.

Constructed inputs on which the two-sided and level-aware tests read `not supported` (they read `supported` or
`partly` before), and an enumeration of every claim of `claim_texts.CLAIMS` whose thresholds must each carry a
record at ×½ and ×2 in the sensitivity (a verdict there, or `not_varied` with the reason), with the settings each
measurement fixed recorded by name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sinkscope.reproduction import verdicts as v
from sinkscope.reproduction.ablation_claims import dormant_heads_verdict, sink_ablation_verdict
from sinkscope.reproduction.claim_texts import CLAIMS
from sinkscope.reproduction.cost_claims import cost_closed_forms_verdict, cost_real_verdict
from sinkscope.reproduction.experiment_claims import (
    cost_boundary_trained_verdict,
    cost_boundary_verdict,
    dense_causal_verdict,
    prevalence_verdict,
    sink_in_use_verdict,
)
from sinkscope.reproduction.geometry_claims import geometry_verdict, representability_verdict
from sinkscope.reproduction.kv_plan_claims import kv_plan_verdict
from sinkscope.reproduction.regime_claims import regimes_verdict
from sinkscope.reproduction.sink_rate_claims import gu_sink_rate_verdict
from sinkscope.reproduction.smoothing_claims import oversmoothing_verdict
from sinkscope.reproduction.switch_assumption_claims import assumptions_verdict
from sinkscope.reproduction.switch_claims import switch_routes_verdict, switch_verdict, value_drain_verdict
from sinkscope.reproduction.weight_claims import weights_verdict

S, P, N = v.SUPPORTED, v.PARTLY, v.NOT_SUPPORTED
W = 10
RNG = np.random.default_rng(0)


def controls(mean: float) -> np.ndarray:
    return mean + RNG.normal(0, 0.01, (W, 20))


def test_sink_ablation_is_two_sided():
    """A −2 nat change against controls of +0.05 was `supported` (ratio −40 ≤ 0.5); its size is 40 × theirs."""
    result = sink_ablation_verdict("m", np.full(W, -2.0), controls(0.05), controls(0.05))
    assert result.verdict == N and result.interval["estimate"] == pytest.approx(2.0 / 0.05, rel=0.02)
    assert result.evidence["selected_lowers_loss"] == 1.0 and result.reason.startswith("zeroing them lowers the loss")
    small = sink_ablation_verdict("m", np.full(W, -0.01), controls(0.05), controls(0.05))
    assert small.verdict == S  # a small change either way is what the claim says


def test_dormant_heads_stays_one_sided():
    """Zeroing dormant heads "at little cost": a loss that falls is no cost (the ratio keeps its sign)."""
    assert dormant_heads_verdict("m", np.full(W, -0.5), controls(0.05), controls(0.05)).verdict == S


def certificate_rows(bos: float, layers=range(6)) -> list[dict]:
    return [{"layer": i, "n_contexts": 100, "h1": True, "h2": True, "gamma2_rel": bos,
             "control_gamma2_rel": list(np.linspace(0.1, 0.3, 20))} for i in layers]  # fmt: skip


def test_representability_reads_not_supported_when_bos_is_below_its_controls():
    """H1 and H2 hold in every layer (random tokens pass them too) but BOS is below every control: `not
    supported` (was `partly`); above 15 of 20 controls (not 95 %): `partly`."""
    assert representability_verdict("m", certificate_rows(0.05), width=10).verdict == N
    assert representability_verdict("m", certificate_rows(0.25), width=10).verdict == P


def test_weights_low_rank_needs_the_level():
    """Effective ranks 53.7 vs 57.4 of a head dimension 64, clearly lower within every layer: `not supported`
    (was `partly`); the same ranks in a head dimension of 256 (≤ half of it): `partly`."""
    layers = np.repeat(np.arange(4), 10)
    sink = np.tile(np.r_[np.ones(5), np.zeros(5)], 4)
    ranks = np.where(sink > 0, 53.7, 57.4) + RNG.normal(0, 0.3, 40)
    assert weights_verdict("weights_low_rank", "m", ranks, sink, layers, head_dim=64).verdict == N
    assert weights_verdict("weights_low_rank", "m", ranks, sink, layers, head_dim=256).verdict == P


def test_cost_real_layers_needs_eight_windows_and_can_fail():
    assert cost_real_verdict("m", np.ones((4, 3)), [8, 16, 32]).reason.startswith("too few windows: 4")
    assert cost_real_verdict("m", np.zeros((8, 3)), [8, 16, 32]).verdict == N
    partial = cost_real_verdict("m", np.ones((8, 3)), [8, 16, 32], layers=[0, 6, 12], depth=18)
    stride = [r for r in partial.sensitivity if r["threshold"] == "layer_stride"]
    assert stride and "layers 0, 6, 12 of 18" in stride[0]["not_varied"]
    every = cost_real_verdict("m", np.ones((8, 3)), [8, 16, 32], layers=list(range(18)), depth=18)
    assert not [r for r in every.sensitivity if r["threshold"] == "layer_stride"]  # nothing left unsolved


def prevalence_rows(sink: float, diag: float, heads: int = 10) -> pd.DataFrame:
    return pd.DataFrame([{"window": w, "layer": 0, "head": h, "sink_score": sink, "diag_score": diag,
                          "class": "x"} for w in range(W) for h in range(heads)])  # fmt: skip


def test_prevalence_reads_not_supported_when_every_head_passes_both_cuts():
    """Every head above ε on both scores: a sink-first precedence called all of them sinks (supported); by
    symmetric cuts they are neither, and with no class at all the effect does not exist."""
    assert prevalence_verdict("m", prevalence_rows(0.45, 0.45)).verdict == v.NOT_MEASURABLE
    assert prevalence_verdict("m", prevalence_rows(0.05, 0.8)).verdict == N


def _losses():
    full = 2 + RNG.normal(0, 0.01, W)
    return {"full": full, "recent": full + 1.0, "sink": full + 0.2, "control": full + 0.9,
            "position": np.ones(W), "seq_len": 128, "window": 16}  # fmt: skip


def _dense():
    rows = [{"window": w, "layer": layer, "head": h, "lam": lam, "cos": 0.5 + lam * 0.1}
            for w in range(W) for layer in range(2) for h in (-1, *range(10)) for lam in (0.0, 1.0)]  # fmt: skip
    return dense_causal_verdict("m", pd.DataFrame(rows))


def _boundary():
    geometry = pd.DataFrame({"cheaper_predicted": ["sink"] * 24, "agree": [True] * 24, "T": [4] * 24,
                             "d": [16] * 24, "rank": [2] * 24})  # fmt: skip
    vocabulary = pd.DataFrame({"cheaper_closed": ["sink"] * 4, "cheaper_exact": ["sink"] * 4})
    return cost_boundary_verdict(vocabulary, geometry)


def _trained():
    runs = pd.DataFrame({"setting": ["a"] * 3 + ["b"] * 3, "predicted": ["diagonal"] * 3 + ["sink"] * 3,
                         "pattern": ["diagonal"] * 3 + ["sink"] * 3, "steps": [10] * 6})  # fmt: skip
    return cost_boundary_trained_verdict(runs)


def _weights(claim):
    layers = np.repeat(np.arange(4), 10)
    sink = np.tile(np.r_[np.ones(5), np.zeros(5)], 4)
    values = np.where(sink > 0, 1.0, 4.0) + RNG.normal(0, 0.05, 40)
    return weights_verdict(claim, "m", values, sink, layers, n_layers=8 if claim != "weights_low_rank" else None,
                           head_dim=64)  # fmt: skip


def _switch():
    """Per head (switch section): head 0 a hard switch (every query off and a sink, v_0 drained), head 1 a sink
    whose value does not drain; the same at every δ and τ scale."""
    counts = np.zeros((W, 3, 3, 1, 2, 3))
    counts[..., :, :] = [[15, 15, 15], [0, 0, 15]]
    return switch_verdict("m", {"head_counts": counts, "head_drain": np.tile([0.0, 2.0], (W, 1, 1)),
                                "tau": np.array(0.1), "delta": np.array(0.1)}, 15, 0.1)  # fmt: skip


def _assumptions():
    spectrum = np.zeros((W, 2, 1, 3))
    spectrum[:, :, 0] = [1.0, 0.5, 0.2]  # independent context values in every layer
    arrays = {"value_sv": spectrum, "heads": np.tile([10.0, 10.0, 10.0], (W, 2, 2, 1)),
              "distance": np.full((W, 2), 0.5), "rank": np.full((W, 2), 3), "n_contexts": 3, "width": 16,
              "head_dim": 4}  # fmt: skip
    return assumptions_verdict("m", arrays)


def _routes():
    counts = np.zeros((W, 3, 3, 6))
    counts[..., 0] = 10
    return switch_routes_verdict("m", counts, ["bos_sink", "cancellation", "bos_partial", "self", "low"],
                                 [True, False, True, False, False])  # fmt: skip


def _drain():
    hard = np.zeros((W, 3, 4, 6))  # at δ × ½, 1, 2; (layers, heads)
    hard[..., 0] = 60  # kv group 0 of each layer sinks
    drains = np.ones((W, 4, 3)) + RNG.normal(0, 0.01, (W, 4, 3))
    drains[:, :, 0] = 0.1
    return value_drain_verdict("m", drains, hard, 63)


full = np.full((W, 9), 10)
CONSTRUCTED = {
    "switch": _switch, "switch_assumptions": _assumptions, "switch_routes": _routes, "value_drain": _drain,
    "geometry": lambda: geometry_verdict("m", {"z": full, "z_control": 0 * full, "h": full, "h_control": 0 * full},
                                         10),  # fmt: skip
    "representability": lambda: representability_verdict("m", certificate_rows(0.9, range(6, 18)), width=10,
                                                        n_layers=24),
    "oversmoothing": lambda: oversmoothing_verdict("m", np.full(40, 0.1), np.ones(40, bool), np.repeat(range(4), 10)),
    "sink_ablation": lambda: sink_ablation_verdict("m", np.full(W, 0.01), controls(1.0), controls(1.0)),
    "dormant_heads": lambda: dormant_heads_verdict("m", np.full(W, 0.01), controls(1.0), controls(1.0)),
    "cost_closed_forms": lambda: cost_closed_forms_verdict("theory", 0.5, 1.0, 1e-9),
    "cost_real_layers": lambda: cost_real_verdict("m", np.ones((8, 3)), [8, 16, 32], layers=[0, 6], depth=12),
    "bigram_backcopy_regimes": lambda: regimes_verdict("synthetic", {"gpt2": ({"bos_mass": 0.9}, {"bos_mass": 0})}),
    "weights_low_rank": lambda: _weights("weights_low_rank"),
    "weights_bos_alignment": lambda: _weights("weights_bos_alignment"),
    "gu_sink_rate": lambda: gu_sink_rate_verdict("m", {k: np.full((W, 2, 2), 0.9) for k in ("natural", "random",
                                                                                         "repeat")}),  # fmt: skip
    "sink_in_use": lambda: sink_in_use_verdict("m", _losses()),
    "dense_causal": _dense,
    "prevalence": lambda: prevalence_verdict("m", prevalence_rows(0.8, 0.05)),
    "cost_boundary": _boundary,
    "cost_boundary_trained": _trained,
    "kv_plan_measures": lambda: kv_plan_verdict("m", {"full": np.zeros(W), "plan": np.full(W, 0.02),
                                                      "random": controls(0.2)}),  # fmt: skip
}
ELSEWHERE = {"mlp_like"}  # descriptive: no threshold, no verdict
# What each measurement fixed, recorded in the sensitivity as not varied by these names.
RECORDED = {"sink_in_use": {"T", "recent_window"}, "dense_causal": {"lambda"}, "prevalence": {"class_cuts"},
            "cost_boundary": {"grid"}, "cost_boundary_trained": {"settings"},
            "cost_real_layers": {"T_min", "T_max", "layer_stride"}, "sink_ablation": {"head_fraction",
                                                                                       "sink_query_delta"},
            "dormant_heads": {"head_fraction"}, "kv_plan_measures": {"share", "window", "draws"}}  # fmt: skip


def test_every_claim_is_enumerated():
    assert set(CONSTRUCTED) | ELSEWHERE == set(CLAIMS)


@pytest.mark.parametrize("claim", sorted(CONSTRUCTED))
def test_every_threshold_is_varied_or_recorded(claim):
    result = CONSTRUCTED[claim]()
    assert result.verdict in (S, P, N), (claim, result.verdict, result.reason)
    assert result.thresholds, claim
    for name in result.thresholds:
        scales = {r["scale"]: r for r in result.sensitivity if r["threshold"] == name}
        assert set(scales) == {0.5, 2.0} or set(scales) == {None}, (claim, name, scales)
        for record in scales.values():
            assert record["verdict"] is not None or record["not_varied"], (claim, name)
    recorded = {r["threshold"] for r in result.sensitivity if r["verdict"] is None}
    assert RECORDED.get(claim, set()) <= recorded, (claim, recorded)
    assert all(r["not_varied"] for r in result.sensitivity if r["verdict"] is None)
