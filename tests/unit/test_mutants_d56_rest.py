"""Draw 56's survivors in the synthetic models, masked attention and the switch/geometry claims, closed against
hand values: the tiny transformer's rotary embedding written out for one pair of positions; the switch-assumption
table's value rank counted in exact arithmetic on a float32 spectrum at the tolerance's edge."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sinkscope.reproduction.geometry_claims import geometry_verdict, representability_verdict
from sinkscope.reproduction.switch_assumption_claims import assumptions_table, assumptions_verdict
from sinkscope.reproduction.switch_claims import sink_head_census, switch_verdict
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, SUPPORTED
from sinkscope.synthetic.tiny_transformer import rope


def test_rope_rotates_each_half_split_pair_by_position_times_its_frequency():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64).expand(1, 1, 2, 4)
    out = rope(x)[0, 0]
    assert out[0].tolist() == [1.0, 2.0, 3.0, 4.0]  # position 0: no rotation
    # position 1, d_head 4: pairs (x0, x2) at frequency 10000^(−0/4) = 1 and (x1, x3) at 10000^(−2/4) = 0.01
    expected = []
    for a, b, angle in ((1.0, 3.0, 1.0), (2.0, 4.0, 0.01)):
        cos, sin = math.cos(angle), math.sin(angle)
        expected.append((a * cos - b * sin, a * sin + b * cos))
    (c0, s0), (c1, s1) = expected
    assert out[1].tolist() == pytest.approx([c0, c1, s0, s1], abs=1e-12)


def test_value_rank_counts_at_the_tolerance_in_float64_on_a_float32_spectrum():
    # rank_rtol 1e-4 × 13 = 0.0013000000000000002 in float64; the float32 value just above it, 0.0013000000035390258,
    # counts (float32 arithmetic would round the threshold onto it and drop it); value_independent_frac agrees
    edge = np.float32(13) * np.float32(1e-4)
    arrays = {"n_contexts": np.array(2), "width": np.array(4), "head_dim": np.array(4), "rank": np.array([[2]]),
              "distance": np.array([[1.0]]), "value_sv": np.array([[[[13.0, edge]]]], dtype=np.float32),
              "heads": np.zeros((1, 1, 1, 3))}  # fmt: skip
    row = assumptions_table(arrays).iloc[0]
    assert row["value_rank_median"] == 2 and row["value_independent_frac"] == 1.0


def _assumption_arrays(heads_dtype=np.float64) -> dict[str, np.ndarray]:
    """8 windows, 1 layer, 1 KV head of 1 query head: 2 context values, independent (singular values 1, 0.5 in 4
    dimensions); per window 3 switched-off queries, 1 of them on the sink."""
    return {"n_contexts": np.array(2), "width": np.array(4), "head_dim": np.array(4), "rank": np.full((8, 1), 2),
            "distance": np.ones((8, 1)), "value_sv": np.tile([1.0, 0.5], (8, 1, 1, 1)),
            "heads": np.tile(np.array([1, 3, 1], dtype=heads_dtype), (8, 1, 1, 1))}  # fmt: skip


def test_assumptions_verdict_without_value_spectra_is_not_measurable():
    arrays = _assumption_arrays()
    del arrays["value_sv"]
    verdict = assumptions_verdict("tiny", arrays)
    assert verdict.verdict == NOT_MEASURABLE and "no value-space spectra" in verdict.reason


def test_switch_implies_sink_from_float32_counts_is_the_exact_ratio():
    verdict = assumptions_verdict("tiny", _assumption_arrays(np.float32))
    assert verdict.evidence["independent_share"] == 1.0
    # 8 sinks among 24 switched-off queries, in float64 (float32 division would give 0.3333333432674408)
    assert verdict.evidence["switch_implies_sink_where_independent"] == pytest.approx(1 / 3, rel=1e-12)
    assert math.isnan(verdict.evidence["switch_implies_sink_where_dependent"])  # no dependent cell


def test_representability_sensitivity_is_not_measurable_where_the_narrowed_band_has_too_few_layers():
    # depth 13: the band ¼ … ¾ is layers 3..9 (l / 12); the margin doubled on the odds scale (0.25 → 0.4) keeps l / 12
    # in [0.4, 0.6], layers 5, 6, 7: fewer than MIN_LAYERS = 4
    controls = list(np.linspace(0.1, 0.5, 20))
    layers = [{"layer": layer, "n_contexts": 100, "h1": True, "h2": True, "gamma2_rel": 1.0,
               "control_gamma2_rel": controls, "n_controls": 20} for layer in range(3, 10)]  # fmt: skip
    verdict = representability_verdict("tiny", layers, width=10, n_layers=13)
    assert verdict.evidence["layers_beyond_control"] == 1.0  # BOS above all 20 controls on every layer
    (narrowed,) = [s for s in verdict.sensitivity if s["threshold"] == "middle_margin" and s["scale"] == 2]
    assert narrowed["value"] == pytest.approx(0.4) and narrowed["verdict"] == NOT_MEASURABLE


def test_geometry_sensitivity_narrows_the_middle_band_at_both_ends():
    # depth 11 (l / 10), 8 windows of 10 tokens: BOS non-positive against every token on each layer but layer 7,
    # the controls never; the band ¼ … ¾ is layers 3..7 (4 of 5 hold: 0.8 ≥ 1 − 0.2), the margin doubled (0.4)
    # keeps layers 4..6 (all hold: supported), where a band still ending at ¾ would keep layer 7 (3 of 4: partly)
    bos = np.full((8, 11), 10.0)
    bos[:, 7] = 0.0
    counts = {"z": bos, "h": bos, "z_control": np.zeros((8, 11)), "h_control": np.zeros((8, 11))}
    verdict = geometry_verdict("tiny", counts, tokens=10)
    assert verdict.evidence["middle_layers_holding"] == pytest.approx(0.8)
    (narrowed,) = [s for s in verdict.sensitivity if s["threshold"] == "middle_margin" and s["scale"] == 2]
    assert narrowed["value"] == pytest.approx(0.4) and narrowed["verdict"] == SUPPORTED


def test_sink_head_census_counts_a_hard_switch_by_p_off_given_sink():
    # (W, L, H, 3) = off ∧ sink, off, sink over 10 queries: head 0 off on all 10 sink queries (P = 1), head 1 on
    # 3 of its 6 (P = 0.5 < 1 − 0.1); both sink on ≥ half their queries; head 0's drain 0.01 ≤ 0.1
    counts = np.array([[[[10, 10, 10], [3, 5, 6]]]], dtype=float)
    census = sink_head_census(counts, np.array([[[0.01, 0.5]]]), queries=10, drain_max=0.1, miss_tol=0.1)
    assert census == {"n_heads": 2, "n_sink_heads": 2, "n_sink_heads_hard_switch": 1, "n_sink_heads_drained": 1,
                      "hard_switch_heads": "L0.H0"}  # fmt: skip


def test_switch_verdict_without_per_head_counts_says_to_recompute():
    # a switch section from before the per-head counts
    arrays = {"tau": np.array(0.1), "delta": np.array(0.5)}
    verdict = switch_verdict("tiny", arrays, queries=10, drain_max=0.1)
    assert verdict.verdict == NOT_MEASURABLE
    assert verdict.reason == ("no per-head switch counts: the switch section is from before the per-head test; "
                              "recompute it")  # fmt: skip


def test_masked_sdpa_ands_an_additive_model_mask_with_its_own():
    from sinkscope.pipelines.masked_attention import masked_sdpa

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 3, 4, dtype=torch.float64) for _ in range(3))
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = False, 1
    allowed = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)[None, None]  # causal
    additive = torch.tensor([0.0, -torch.inf, 0.0], dtype=torch.float64).expand(1, 1, 3, 3)  # key 1 padded
    out = masked_sdpa(module, q, k, v, additive, allowed, dropout=0.0, scaling=0.5)[0][0, :, 0]  # (T, d)
    for t, keys in enumerate([[0], [0], [0, 2]]):  # causal AND not key 1, by hand
        weights = torch.softmax(torch.stack([q[0, 0, t] @ k[0, 0, j] * 0.5 for j in keys]), 0)
        expected = sum(w * v[0, 0, j] for w, j in zip(weights, keys))
        assert out[t].tolist() == pytest.approx(expected.tolist(), abs=1e-12)
