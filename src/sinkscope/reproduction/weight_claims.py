"""Section 5's weight claims: `weights_low_rank` (sink heads' W_QK of low effective rank) and
`weights_bos_alignment` (sink heads' W_QK aligned with BOS), each compared with the other heads of the same layer
(`reproduction.strata`). Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the claims'
words in `reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sinkscope.reproduction.minima import MIN_STRATA
from sinkscope.reproduction.strata import middle_layers, stratified_difference, within_layer_permutation_p
from sinkscope.reproduction.verdicts import (
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    Verdict,
    judge,
    too_few,
)

WEIGHTS_LOW_RANK = {"min_effect": 0.2, "rank_max": 2.0, "epsilon": 0.3, "partly_rank_frac": 0.5}
WEIGHTS_ALIGNMENT = {"min_effect": 0.2, "rank1_score": 0.5, "epsilon": 0.3, "middle_margin": 0.25}
WIDER_BAND = ("the p̂/q̂ scores exist only where the certificates ran (depth ¼ … ¾): a wider band needs another "
              "certificate pass")  # fmt: skip


def weights_verdict(claim: str, model: str, values: Sequence[float], sink_score: Sequence[float],
                    layers: Sequence[int], seed: int = 0, n_layers: int | None = None,
                    head_dim: int | None = None) -> Verdict:  # fmt: skip
    """Claims `weights_low_rank` (sink heads' W_QK effective rank lower than other heads' of the same layer, and
    near the rank 1 the claim names: median ≤ `rank_max`; partly needs the level too: median ≤
    `partly_rank_frac` × `head_dim`, the largest rank W_QK of one head can have) and `weights_bos_alignment` (sink heads' signed p̂/q̂
    score higher within layers, and near the ≈ 1 of a rank-1 reading: median ≥ `rank1_score`).

    Sink heads: mean sink score α > `epsilon` (the head class `sink` at ε = 0.3; booleans read as α 0 or 1).
    Effect: the standardised within-layer difference in the claimed direction (`reproduction.strata`).
    Supported: ≥ `min_effect` and the sink heads' level as the claim names it; partly: ≥ `min_effect` (and, for
    the low rank, the sink heads' median at most `partly_rank_frac` of `head_dim`); else not supported. Interval over heads resampled within layers; the within-layer permutation p-value is
    reported, never deciding. Needs ≥ `MIN_STRATA` layers holding both classes.
    `n_layers` (the alignment claim): the model's depth, so that the middle band (`middle_margin`) can be
    narrowed in the sensitivity; it cannot be widened beyond the layers that were scored."""
    lower = claim == "weights_low_rank"
    thresholds = dict(WEIGHTS_LOW_RANK if lower else WEIGHTS_ALIGNMENT)
    if lower and head_dim is None:
        raise ValueError("weights_low_rank needs the head dimension (head_dim): the level of a low rank is relative to it")
    fixed = {}
    if lower or n_layers is None:
        thresholds.pop("middle_margin", None)
    else:
        fixed["middle_margin×0.5"] = WIDER_BAND
    values, scores, layers = np.asarray(values, float), np.asarray(sink_score, float), np.asarray(layers)
    keep = np.isfinite(values) & np.isfinite(scores)
    values, scores, layers = values[keep], scores[keep], layers[keep]
    is_sink = scores > thresholds["epsilon"]
    sign = -1.0 if lower else 1.0
    _, _, strata = stratified_difference(values, is_sink, layers)
    evidence = {"n_sink_heads": int(is_sink.sum()), "n_other_heads": int((~is_sink).sum()), "layers_with_both": strata,
                "claimed_direction": "sink heads lower" if lower else "sink heads higher"}  # fmt: skip
    if strata < MIN_STRATA:
        return too_few(claim, model, "layers holding sink and other heads", strata, MIN_STRATA, evidence, thresholds)

    def effects(u, th):
        band = np.ones(len(u["layers"]), bool)
        if "middle_margin" in th:
            band = np.isin(u["layers"], middle_layers(n_layers, th["middle_margin"], 1 - th["middle_margin"]))
        x, sink, at = u["values"][band], u["scores"][band] > th["epsilon"], u["layers"][band]
        difference, standardised, used = stratified_difference(x, sink, at)
        if used == 0:  # no layer holds both classes (a resample may hold fewer than MIN_STRATA: it still counts)
            return {"effect_within_layers": math.nan}
        sinks, others = x[sink], x[~sink]
        return {"effect_within_layers": sign * standardised, "difference_within_layers": difference,
                "median_sink_heads": float(np.median(sinks)), "median_other_heads": float(np.median(others)),
                "pooled_median_difference": float(np.median(sinks) - np.median(others))}  # fmt: skip

    def decide(e, th):
        if not math.isfinite(e["effect_within_layers"]):
            return NOT_MEASURABLE
        level = (e["median_sink_heads"] <= th["rank_max"]) if lower else (e["median_sink_heads"] >= th["rank1_score"])
        if e["effect_within_layers"] < th["min_effect"]:
            return NOT_SUPPORTED
        if level:
            return SUPPORTED
        return PARTLY if not lower or e["median_sink_heads"] <= th["partly_rank_frac"] * head_dim else NOT_SUPPORTED

    evidence["p_value_within_layers"] = within_layer_permutation_p(values, is_sink, layers, greater=not lower, seed=seed)
    evidence["max_value"] = float(values.max())
    if lower:
        evidence["head_dim"] = int(head_dim)
    units = {"values": values, "scores": scores, "layers": layers}
    return judge(claim, model, units, effects, decide, thresholds, over="heads", min_units=2 * MIN_STRATA,
                 strata=layers, seed=seed, evidence=evidence, fixed=fixed,
                 fractions=("partly_rank_frac",) if lower else ("rank1_score", "middle_margin"),
                 decides_on=("effect_within_layers", "median_sink_heads"))  # fmt: skip
