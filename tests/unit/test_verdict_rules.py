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
