"""Draw 57's survivors in the KV plans and the boundary lab, closed against hand values (issue 50, item 1).

- `summarize`: one window gives no interval and no warning; `beats_random` for each policy compared with the random
  draws (sinkscope, far-mass, oracle, plan) against the draws' losses by hand.
- `figure`: every policy of the legend is drawn in its colour.
- `write_plan`: each head's reason names its kind (full or streaming) with its scores.
- `run_boundary`: one run to do starts no worker pool, whatever `workers` says.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tests.unit.test_mutants_d56_open import SUMMARY, _FakePool

from sinkscope.pipelines.kv_plan import PlanConfig, full_heads, write_plan
from sinkscope.pipelines.kv_plan_eval import figure, summarize
from sinkscope.reproduction.geometry_claims import GEOMETRY, geometry_verdict, representability_verdict
from sinkscope.reproduction.kv_plan_claims import kv_plan_verdict
from sinkscope.reproduction.switch_assumption_claims import assumptions_verdict
from sinkscope.reproduction.switch_claims import switch_curves, switch_routes_verdict
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, PARTLY, SUPPORTED
from sinkscope.synthetic import boundary_runs
from sinkscope.synthetic.boundary_runs import BoundarySetting, run_boundary

W_SWITCH = 8  # MIN_WINDOWS


def _row(policy: str, n: int, loss: float, draw: int = 0, window: int = 0) -> dict:
    return {"policy": policy, "draw": draw, "n_full": n, "share": n / 4, "memory": 0.25 + n / 8, "window": window,
            "loss": loss, "accuracy": 0.5}  # fmt: skip


def test_summarize_of_one_window_warns_of_nothing() -> None:
    rows = pd.DataFrame([_row("full", 4, 2.0), _row("sinkscope", 1, 2.5)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a standard deviation of one value (ddof = 1) warns "Degrees of freedom"
        summary = summarize(rows).set_index("policy")
    assert np.isnan(float(summary.loc["sinkscope", "delta_lo"]))


def test_beats_random_of_each_compared_policy_by_hand() -> None:
    """Random draws at n_full = 1 lose 2.0, 3.0 and 4.0: a policy losing 2.5 beats 2 of 3 draws, one losing 3.5
    beats 1 of 3; the full and streaming ends are not compared (NaN)."""
    losses = {"sinkscope": 2.5, "far-mass": 3.5, "oracle": 2.5, "plan": 3.5}
    rows = pd.DataFrame([_row("full", 4, 1.0), _row("streaming", 0, 5.0)]
                        + [_row("random", 1, 2.0 + d, draw=d) for d in range(3)]
                        + [_row(p, 1, loss) for p, loss in losses.items()])  # fmt: skip
    beats = summarize(rows).set_index("policy")["beats_random"]
    assert {p: beats[p] for p in losses} == pytest.approx({"sinkscope": 2 / 3, "far-mass": 1 / 3, "oracle": 2 / 3,
                                                            "plan": 1 / 3})  # fmt: skip
    assert np.isnan(beats["full"]) and np.isnan(beats["streaming"])


def test_figure_draws_every_policy_in_its_colour() -> None:
    colours = {"sinkscope": "#c0392b", "far-mass": "#d68910", "oracle": "#2471a3", "plan": "#1e8449"}
    summary = pd.DataFrame([{"policy": "streaming", "memory": 0.2, "loss": 3.0, "accuracy": 0.1, "delta_full": 1.0},
                            {"policy": "full", "memory": 1.0, "loss": 2.0, "accuracy": 0.9, "delta_full": 0.0}]
                           + [{"policy": p, "memory": 0.6, "loss": 2.5, "accuracy": 0.6, "delta_full": 0.5}
                              for p in colours])  # fmt: skip
    loss_ax, _ = figure(summary, "t").axes
    drawn = {line.get_label(): line.get_color() for line in loss_ax.get_lines()}
    assert {p: drawn.get(p) for p in colours} == colours


def test_plan_reasons_name_each_heads_kind_and_scores(tmp_path: Path) -> None:
    scores = pd.DataFrame({"layer": [0, 0], "kv_head": [0, 1], "kept": [0.9, 0.2], "sink_score": [0.5, 0.1],
                           "diag_score": [0.3, 0.05], "prev_score": [0.1, 0.05], "far_mass": [0.05, 0.6],
                           "classes": ["sink×2", "mixed×2"]})  # fmt: skip
    folder = write_plan(tmp_path / "plan", np.array([[0.2, 0.9]]), scores, PlanConfig(share=0.5), {})
    reasons = pd.read_parquet(folder / "kv_plan_heads.parquet")["reason"].tolist()
    assert reasons == ["streaming: kept ≥ 0.90 (sink 0.50, diag 0.30, prev 0.10), far mass 0.05 [measures]; sink×2",
                       "full: kept ≥ 0.20 (sink 0.10, diag 0.05, prev 0.05), far mass 0.60 [measures]; mixed×2"]


def test_run_boundary_with_one_run_to_do_starts_no_pool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import concurrent.futures

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _FakePool)
    monkeypatch.setattr(boundary_runs, "train_bb", lambda c, d, **kw: SUMMARY)
    _FakePool.made = []
    frame = run_boundary(tmp_path, settings=(BoundarySetting(5, 8, 16),), seeds=(0,), steps=7, workers=2)
    assert _FakePool.made == [] and len(frame) == 1


def test_switch_curves_are_defined_from_a_single_query_on() -> None:
    """Cells (off·sink, off·no sink, on·sink, on·no sink) = (2, 1, 2, 0) at τ₁ and (0, 0, 0, 1) at τ₂: by hand
    P(sink | off) = 2/3 and NaN, P(off | sink) = 1/2 and NaN, P(off | no sink) = 1/1 and 0/1."""
    curves = switch_curves(np.array([[2, 1, 2, 0], [0, 0, 0, 1]]))
    np.testing.assert_array_equal(curves["p_sink_given_off"], [2 / 3, np.nan])
    np.testing.assert_array_equal(curves["p_off_given_sink"], [0.5, np.nan])
    np.testing.assert_array_equal(curves["p_off_given_nosink"], [1.0, 0.0])


def test_kv_plan_verdict_at_saved_min_exactly_is_supported_before_the_sensitivity() -> None:
    """Full cache 0, plan 0.75, every random plan 1.0 (8 windows × 20 draws): saved share 1 − 0.75 / 1 = 0.25, exactly
    `saved_min`, so every record that keeps saved_min reads supported; doubling it (0.4 on the odds scale) gives
    partly, which weakens the verdict."""
    verdict = kv_plan_verdict("m", {"full": np.zeros(8), "plan": np.full(8, 0.75), "random": np.ones((8, 20))})
    assert verdict.evidence["saved_share"] == 0.25 and verdict.evidence["beats_random"] == 1.0
    by = {(r["threshold"], r["scale"]): r["verdict"] for r in verdict.sensitivity if r["verdict"] is not None}
    assert by == {("saved_min", 0.5): SUPPORTED, ("saved_min", 2.0): PARTLY, ("beats_min", 0.5): SUPPORTED,
                  ("beats_min", 2.0): SUPPORTED, ("partly_min", 0.5): SUPPORTED, ("partly_min", 2.0): SUPPORTED}
    assert verdict.verdict == PARTLY


def test_kv_plan_verdict_without_a_random_increase_is_not_measurable_and_says_so() -> None:
    verdict = kv_plan_verdict("m", {"full": np.zeros(8), "plan": np.full(8, 0.75), "random": np.zeros((8, 20))})
    assert verdict.verdict == NOT_MEASURABLE
    assert verdict.evidence["random_increase"] == 0.0 and np.isnan(verdict.evidence["saved_share"])


def test_representability_partly_is_shown_with_the_interval_of_layers_ahead() -> None:
    """Four middle layers with H1 and H2: in two BOS's γ₂/‖z‖ (1.0) beats all 20 controls (0.5: beyond), in two it
    beats 15 of 20 (ahead, not beyond: 0.75 < 0.95). Beyond: 2 of 4 < 1 − 0.2, so not supported; ahead: 4 of 4, so
    partly, shown with the interval of `layers_ahead_of_control` (every layer ahead: [1, 1])."""
    beyond = {"n_contexts": 30, "h1": True, "h2": True, "gamma2_rel": 1.0, "control_gamma2_rel": [0.5] * 20}
    ahead = beyond | {"control_gamma2_rel": [0.5] * 15 + [2.0] * 5}
    layers = [beyond | {"layer": 3}, ahead | {"layer": 4}, beyond | {"layer": 5}, ahead | {"layer": 6}]
    verdict = representability_verdict("m", layers, 16)
    assert verdict.verdict == PARTLY
    assert (verdict.evidence["layers_beyond_control"], verdict.evidence["layers_ahead_of_control"]) == (0.5, 1.0)
    assert verdict.interval["effect"] == "layers_ahead_of_control"
    assert (verdict.interval["low"], verdict.interval["high"]) == (1.0, 1.0)


def test_switch_assumptions_resample_with_seed_0_by_default() -> None:
    """Each layer's values are independent in a random 60 % of 9 windows (spectrum (1, 0.5, 0.3) against (1, 0.5,
    0)), so the bootstrap interval of the independent share moves with the seed (seed 0: [0.28, 0.78], seed 1: [0.33, 0.78])."""
    rng = np.random.default_rng(2)
    spectrum = np.zeros((9, 2, 1, 3))
    spectrum[..., :] = [1.0, 0.5, 0.3]
    spectrum[..., 2] *= rng.random((9, 2, 1)) < 0.6
    arrays = {"value_sv": spectrum, "heads": np.tile([9.0, 10.0, 12.0], (9, 2, 2, 1)),
              "distance": np.tile([0.05, 0.01], (9, 1)), "rank": np.full((9, 2), 3), "n_contexts": 3, "width": 16,
              "head_dim": 4}  # fmt: skip
    default, zero, one = (assumptions_verdict("m", arrays, **seed) for seed in ({}, {"seed": 0}, {"seed": 1}))
    assert default.interval == zero.interval
    assert one.interval != zero.interval  # the seed reaches the bootstrap


def test_geometry_counts_the_middle_layers_where_the_control_holds_too() -> None:
    """Depth 11, 8 windows of 10 tokens: BOS non-positive against every token on every layer; the control token
    (against 9 others) on 9 of 9 in layers 3 and 4 and on 8 of 9 in layer 5 (0.89 < 1 − 0.05: not holding). Middle
    band ¼ … ¾ = layers 3..7: the control holds on 2 of 5 (0.4); BOS holds where the control does not, 3 of 5."""
    bos = np.full((8, 11), 10.0)
    control = np.zeros((8, 11))
    control[:, 3:5], control[:, 5] = 9.0, 8.0
    counts = {"z": bos, "h": bos, "z_control": control, "h_control": control}
    evidence = geometry_verdict("m", counts, tokens=10).evidence
    assert evidence["control_layers_holding_z"] == pytest.approx(0.4)
    assert evidence["control_layers_holding_h"] == pytest.approx(0.4)
    assert evidence["middle_layers_holding_z"] == pytest.approx(0.6)


def test_geometry_a_control_exactly_at_the_tolerance_holds_and_so_the_layer_does_not() -> None:
    """21 tokens: the control is non-positive against 19 of its 20 others, 0.95 = 1 − positive_token_tol exactly (≥:
    it holds), so no layer holds for BOS although BOS is non-positive against all 21."""
    assert 19 / 20 == 1 - GEOMETRY["positive_token_tol"]
    counts = {"z": np.full((8, 11), 21.0), "z_control": np.full((8, 11), 19.0)}
    evidence = geometry_verdict("m", counts, tokens=21).evidence
    assert evidence["control_layers_holding_z"] == 1.0 and evidence["middle_layers_holding_z"] == 0.0


def test_full_heads_is_a_boolean_layer_by_kv_head_mask() -> None:
    """Order [2, 0, 1, 3] of 2 layers × 2 KV heads, share ½: flat heads 2 and 0 full, as Bool[L, KV]."""
    full = full_heads(np.array([2, 0, 1, 3]), 2, 2, 0.5)
    assert full.dtype == np.bool_ and full.tolist() == [[True, False], [True, False]]


def test_switch_routes_without_a_bos_sink_route_count_no_hard_sink() -> None:
    """Routes [value_drain, other] (no bos_sink) + unexplained, 10 switched off per window at every scale: 6 on
    value_drain (a BOS route), 3 on other, 1 unexplained. Non-BOS share 4/10, and with no hard-sink route the same
    4/10 among the queries that are not hard sinks."""
    counts = np.tile(np.array([6.0, 3.0, 1.0]), (W_SWITCH, 3, 3, 1))
    verdict = switch_routes_verdict("m", counts, ["value_drain", "other"], [True, False])
    assert verdict.evidence["non_bos_route_frac"] == pytest.approx(0.4)
    assert verdict.evidence["non_bos_among_non_hard_sink"] == pytest.approx(0.4)


def test_geometry_declares_the_two_shares_its_rule_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule reads the smaller and the larger share of middle layers holding (z or h), and nothing else."""
    from sinkscope.reproduction import geometry_claims

    seen = {}
    monkeypatch.setattr(geometry_claims, "judge", lambda *a, **kw: seen.update(kw))
    geometry_verdict("m", {"z": np.ones((8, 4)), "z_control": np.zeros((8, 4))}, tokens=10)
    assert seen["decides_on"] == ("middle_layers_holding", "middle_layers_holding_best")


def test_kv_head_count_of_a_config_without_query_heads_is_one_clear_line() -> None:
    from types import SimpleNamespace

    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines.kv_plan import kv_head_count

    with pytest.raises(SinkscopeError, match="^the config of tiny names no num_attention_heads: .* set "
                                             "num_attention_heads in its config.json"):
        kv_head_count(SimpleNamespace(num_key_value_heads=2, num_hidden_layers=2, name_or_path="tiny"))
    with pytest.raises(SinkscopeError, match="names no num_key_value_heads and no num_attention_heads: .* set "
                                             "num_key_value_heads and num_attention_heads in"):
        kv_head_count(SimpleNamespace(num_hidden_layers=2, name_or_path="tiny"))


def test_plan_attention_moves_the_layers_mask_to_the_queries_device_and_names_a_wrong_size(monkeypatch) -> None:
    """Masks (L = 2, H = 2, 4, 4) on the CPU, queries on the meta device (an accelerator's stand-in): layer 1's
    mask (the diagonal) reaches sdpa as (1, 2, 4, 4) on the queries' device; a 3-token pass is refused naming (4, 4) and 3×3."""
    import torch

    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines import kv_plan_eval

    seen = []
    monkeypatch.setattr(kv_plan_eval, "masked_sdpa", lambda module, q, k, v, mask, allowed, **kw: seen.append(allowed))
    masks = torch.ones(2, 2, 4, 4, dtype=torch.bool).tril()
    masks[1] = torch.eye(4, dtype=torch.bool)  # layer 1: each query sees itself only
    module = type("Attention", (), {"layer_idx": 1})()
    token = kv_plan_eval._MASKS.set(masks)
    try:
        q = torch.zeros(1, 2, 4, 8, device="meta")
        kv_plan_eval._plan_attention(module, q, q, q, None)
        allowed = seen[0]
        assert allowed.device.type == "meta" and tuple(allowed.shape) == (1, 2, 4, 4)
        cpu = torch.zeros(1, 2, 4, 8)
        kv_plan_eval._plan_attention(module, cpu, cpu, cpu, None)
        assert torch.equal(seen[1], masks[1][None])  # layer 1's own mask
        short = torch.zeros(1, 2, 3, 8)
        with pytest.raises(SinkscopeError, match=r"^plan mask of \(4, 4\) for attention of 3×3: the plan is for one"):
            kv_plan_eval._plan_attention(module, short, short, short, None)
    finally:
        kv_plan_eval._MASKS.reset(token)
