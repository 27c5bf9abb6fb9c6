"""Section 5's weight claims: `weights_low_rank` (sink heads' W_QK of low effective rank) and
`weights_bos_alignment` (sink heads' W_QK aligned with BOS), each compared with the other heads of the same layer
(`reproduction.strata`). Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the claims'
words in `reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sinkscope.reproduction.minima import MEASURED_AT, MIN_STRATA
from sinkscope.reproduction.strata import stratified_difference, within_layer_permutation_p
from sinkscope.reproduction.verdicts import (
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    Verdict,
    judge,
    too_few,
)

WEIGHTS_LOW_RANK = {"min_effect": 0.2, "rank_max": 2.0}
WEIGHTS_ALIGNMENT = {"min_effect": 0.2, "rank1_score": 0.5}


def weights_verdict(claim: str, model: str, values: Sequence[float], is_sink: Sequence[bool], layers: Sequence[int],
                    seed: int = 0) -> Verdict:  # fmt: skip
    """Claims `weights_low_rank` (sink heads' W_QK effective rank lower than other heads' of the same layer, and
    near the rank 1 the claim names: median ≤ `rank_max`) and `weights_bos_alignment` (sink heads' signed p̂/q̂
    score higher within layers, and near the ≈ 1 of a rank-1 reading: median ≥ `rank1_score`).

    Effect: the standardised within-layer difference in the claimed direction (`reproduction.strata`).
    Supported: ≥ `min_effect` and the sink heads' level as the claim names it; partly: ≥ `min_effect` only;
    else not supported. Interval over heads resampled within layers; the within-layer permutation p-value is
    reported, never deciding. Needs ≥ `MIN_STRATA` layers holding both classes."""
    lower = claim == "weights_low_rank"
    thresholds = WEIGHTS_LOW_RANK if lower else WEIGHTS_ALIGNMENT
    values, is_sink, layers = np.asarray(values, float), np.asarray(is_sink, bool), np.asarray(layers)
    keep = np.isfinite(values)
    values, is_sink, layers = values[keep], is_sink[keep], layers[keep]
    sign = -1.0 if lower else 1.0
    _, _, strata = stratified_difference(values, is_sink, layers)
    evidence = {"n_sink_heads": int(is_sink.sum()), "n_other_heads": int((~is_sink).sum()), "layers_with_both": strata,
                "claimed_direction": "sink heads lower" if lower else "sink heads higher",
                "measured_at": MEASURED_AT["weights_low_rank"]}  # fmt: skip
    if strata < MIN_STRATA:
        return too_few(claim, model, "layers holding sink and other heads", strata, MIN_STRATA, evidence, thresholds)

    def effects(u, th):
        difference, standardised, _ = stratified_difference(u["values"], u["is_sink"].astype(bool), u["layers"])
        sinks, others = u["values"][u["is_sink"] == 1], u["values"][u["is_sink"] == 0]
        pooled = float(np.median(sinks) - np.median(others)) if sinks.size and others.size else math.nan
        return {"effect_within_layers": sign * standardised, "difference_within_layers": difference,
                "median_sink_heads": float(np.median(sinks)) if sinks.size else math.nan,
                "median_other_heads": float(np.median(others)) if others.size else math.nan,
                "pooled_median_difference": pooled}  # fmt: skip

    def decide(e, th):
        if not math.isfinite(e["effect_within_layers"]):
            return NOT_MEASURABLE
        level = (e["median_sink_heads"] <= th["rank_max"]) if lower else (e["median_sink_heads"] >= th["rank1_score"])
        if e["effect_within_layers"] >= th["min_effect"]:
            return SUPPORTED if level else PARTLY
        return NOT_SUPPORTED

    evidence["p_value_within_layers"] = within_layer_permutation_p(values, is_sink, layers, greater=not lower, seed=seed)
    evidence["max_value"] = float(values.max())
    units = {"values": values, "is_sink": is_sink.astype(float), "layers": layers}
    return judge(claim, model, units, effects, decide, thresholds, over="heads", min_units=2 * MIN_STRATA,
                 strata=layers, seed=seed, evidence=evidence, fractions=() if lower else ("rank1_score",))  # fmt: skip
