"""The verdict rules of `reproduction.verdicts` on the constructed cases that once read wrong: the threshold
sensitivity may annotate a verdict or lower `supported` to `partly`, never raise one (not even a `not supported`
the majority of resamples produced), and a verdict whose whole interval lies below its `partly` cut is `not
supported` whatever a variant says."""

from __future__ import annotations

import numpy as np

from sinkscope.reproduction import verdicts as v

S, P, N = v.SUPPORTED, v.PARTLY, v.NOT_SUPPORTED
SWITCH_LIKE = {"miss_tol": 0.1, "partly_min": 0.5}  # the switch rule: ≥ 0.9 supported, ≥ 0.5 partly


def switch_like(conditional: float, windows: int = 16):
    """Both conditionals `conditional` in every window; graded like `switch` (partly_min on the odds scale, so
    halving it gives 1/3, which `conditional` passes when above it)."""
    units = {"smaller": np.full(windows, conditional)}

    def effects(u, th):
        return {"best_min_conditional": float(u["smaller"].mean())}

    def decide(e, th):
        return v.graded(e["best_min_conditional"], 1 - th["miss_tol"], th["partly_min"])

    return v.judge("switch", "m", units, effects, decide, SWITCH_LIKE, over="windows", min_units=8,
                   fractions=("miss_tol", "partly_min"))  # fmt: skip


def test_an_interval_wholly_below_the_partly_cut_is_not_supported():
    """0.40 in every window: interval [0.40, 0.40] below the cut 0.5; at partly_min 1/3 it would pass. The word
    stays `not supported`, the variant is recorded beside it."""
    result = switch_like(0.40)
    assert (result.interval["low"], result.interval["high"]) == (0.4, 0.4)
    assert result.verdict == N
    assert result.reason == "fragile: partly at partly_min = 0.333"
    halved = [r for r in result.sensitivity if r["threshold"] == "partly_min" and r["scale"] == 0.5]
    assert halved[0]["verdict"] == P  # the variant is computed and kept, never adopted


def test_just_above_a_third_is_still_not_supported():
    result = switch_like(0.34)
    assert result.verdict == N and "partly at partly_min = 0.333" in result.reason


def test_a_supported_verdict_is_lowered_by_a_variant():
    """0.92 ≥ 0.9: supported, but at miss_tol ½ (cut 0.947) it is partly: `partly`, depends on miss_tol."""
    result = switch_like(0.92)
    assert result.verdict == P and result.reason.startswith("depends on miss_tol (miss_tol: partly at 0.0526")


def test_a_verdict_capped_by_the_majority_of_resamples_is_never_raised_back():
    """A point `supported` with 60 % of its resamples `not supported` (and 40 % partly): capped to the majority,
    `not supported`; a variant saying `partly` leaves it there."""
    capped, reason = v.capped(S, [N] * 600 + [P] * 400)
    assert capped == N and "majority" in reason
    records = [{"threshold": "partly_min", "scale": 0.5, "value": 1 / 3, "verdict": P}]
    assert v.sensitive_verdict(capped, reason, S, records) == (N, reason + "; fragile: partly at partly_min = 0.333")


def test_the_cap_through_the_judge_is_not_raised():
    """Through the judge: the effect 0.92 × (share of the 12 units present) is 0.92 at the point (supported at the
    cut 0.9) and below partly_min = 0.62 in 742 of the 1000 resamples (the rest partly, none supported, counted
    independently below): capped to the majority, `not supported`. At miss_tol ½ (cut 0.95) the point would be
    `partly`; that variant is noted, never adopted (it once raised the capped verdict back to `partly`)."""
    ids = np.arange(12)

    def effects(u, th):
        return {"present": 0.92 * np.unique(u["ids"]).size / 12}

    def decide(e, th):
        return v.graded(e["present"], 1 - th["miss_tol"], th["partly_min"])

    thresholds = {"miss_tol": 0.1, "partly_min": 0.62}
    shares = [0.92 * len(set(draw)) / 12 for draw in v.bootstrap_indices(12, v.N_BOOT, 0)]
    assert sum(x < 0.62 for x in shares) == 742 and not any(x >= 0.9 for x in shares)
    result = v.judge("x", "m", {"ids": ids}, effects, decide, thresholds, over="windows", min_units=8)
    assert result.verdict == N and result.interval["estimate"] == 0.92
    assert "stronger than the majority" in result.reason and result.reason.endswith("fragile: partly at miss_tol = 0.05")


def test_a_decision_reads_only_declared_effect_fields():
    """A field outside `decides_on` is not handed to `decide`, whatever its spelling (`pvalue`, `p`)."""
    def effects(u, th):
        return {"difference": 1.0, "pvalue": 0.001, "p": 0.001}

    for name in ("pvalue", "p"):
        try:
            v.judge("x", "m", {"a": np.ones(8)}, effects, lambda e, th, k=name: S if e[k] < 0.05 else N, {},
                    over="windows", min_units=8, decides_on=("difference",))  # fmt: skip
        except KeyError as error:
            assert name in str(error)
        else:
            raise AssertionError(f"decide read the undeclared field {name}")


def test_a_partly_word_is_shown_with_the_interval_of_the_share_its_rule_reads():
    """`geometry`'s rules: supported needs both representations' shares of middle layers ≥ 0.8, partly needs the
    better one ≥ 0.2. z holds in no middle layer (0 in every window), h in every one: the word is `partly`, and
    the interval beside it is h's [1, 1] (the rule's own), not z's [0, 0] below the partly cut; z's stays on
    record as `primary`. Counted by hand: 8 windows × 12 layers, middle band (depth ¼ … ¾) = layers 3 … 8."""
    from sinkscope.reproduction.geometry_claims import geometry_verdict

    W, L, tokens = 8, 12, 10
    z = np.zeros((W, L))  # no token with cos ≤ 0 against BOS on z
    h = np.full((W, L), tokens)  # every token on h
    control = np.zeros((W, L))  # the control token never holds
    result = geometry_verdict("m", {"z": z, "h": h, "z_control": control, "h_control": control}, tokens)
    assert result.verdict == P
    assert result.interval["effect"] == "middle_layers_holding_best"
    assert (result.interval["estimate"], result.interval["low"], result.interval["high"]) == (1.0, 1.0, 1.0)
    assert result.interval["primary"] == {"effect": "middle_layers_holding", "estimate": 0.0, "low": 0.0, "high": 0.0}


def test_a_supported_word_keeps_the_primary_interval():
    """Both representations hold in every layer: `supported`, shown with the smaller share's interval (the one
    `supported` reads), no `primary` entry."""
    from sinkscope.reproduction.geometry_claims import geometry_verdict

    W, L, tokens = 8, 12, 10
    full, control = np.full((W, L), tokens), np.zeros((W, L))
    result = geometry_verdict("m", {"z": full, "h": full, "z_control": control, "h_control": control}, tokens)
    assert result.verdict == S and result.interval["effect"] == "middle_layers_holding"
    assert "primary" not in result.interval


def test_dense_causal_partly_is_shown_with_the_larger_share():
    """Δcos > 0 in every layer but in 1 head of 20 (4 layers × 5 heads): head share 0.05, layer share 1 → `partly`
    (layer share ≥ 0.5), shown with the larger share's interval [1, 1]."""
    import pandas as pd

    from sinkscope.reproduction.experiment_claims import dense_causal_verdict

    rows = []
    for window in range(8):
        for layer in range(4):
            rows += [(window, layer, -1, 0.0, 0.1), (window, layer, -1, 1.0, 0.5)]
            for head in range(5):
                rise = 0.4 if (layer, head) == (0, 0) else -0.2
                rows += [(window, layer, head, 0.0, 0.3), (window, layer, head, 1.0, 0.3 + rise)]
    cosines = pd.DataFrame(rows, columns=["window", "layer", "head", "lam", "cos"])
    result = dense_causal_verdict("m", cosines)
    assert result.evidence["head_share_smoothing"] == 0.05 and result.evidence["layer_share_smoothing"] == 1.0
    assert result.verdict == P
    assert result.interval["effect"] == "best_share_smoothing"
    assert (result.interval["low"], result.interval["high"]) == (1.0, 1.0)


def test_gu_sink_rate_partly_is_shown_with_the_natural_texts_rate():
    """Every head sinks (α = 0.9 > ε) on natural text, none on random and repeated tokens: present on natural text
    only → `partly`, shown with the natural rate's interval [1, 1], not the smallest rate's [0, 0]."""
    from sinkscope.reproduction.sink_rate_claims import gu_sink_rate_verdict

    shape = (8, 3, 4)
    scores = {"natural": np.full(shape, 0.9), "random": np.full(shape, 0.1), "repeat": np.full(shape, 0.1)}
    result = gu_sink_rate_verdict("m", scores)
    assert result.verdict == P and result.interval["effect"] == "sink_rate_natural"
    assert (result.interval["estimate"], result.interval["low"], result.interval["high"]) == (1.0, 1.0, 1.0)
    assert result.interval["primary"]["effect"] == "min_rate" and result.interval["primary"]["high"] == 0.0
