"""Section 3's ablation claims: `sink_ablation` (zeroing the sink-like heads on their sink queries costs less
than matched controls) and `dormant_heads` (zeroing the heads of lowest AHON-LN costs less than random head sets),
with the dormancy curve beside them. Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the
claims' words in `reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sinkscope.reproduction.minima import MEASURED_AT, MIN_DRAWS, MIN_WINDOWS
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, judge

ABLATION = {"supported_ratio": 0.5, "partly_ratio": 1.0}


def _finite(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    return array[np.isfinite(array)]



def _decide_ratio(e, th) -> str:
    ratio = e["ratio"]
    if not math.isfinite(ratio):
        return NOT_MEASURABLE
    return SUPPORTED if ratio <= th["supported_ratio"] else PARTLY if ratio < th["partly_ratio"] else NOT_SUPPORTED


def sink_ablation_verdict(model: str, selected: np.ndarray, same_heads: np.ndarray, random: np.ndarray,
                          extra: dict | None = None, seed: int = 0) -> Verdict:  # fmt: skip
    """Claim `sink_ablation` from per-window Δloss (nats/token): `selected` (W,) the sink-like heads zeroed on
    their sink queries; `same_heads` (W, D) the same heads zeroed on as many of their non-sink queries, and
    `random` (W, D) matched random head-and-query sets, D draws each. Ratios = mean Δ(selected) / mean Δ(control);
    a control that does not raise the loss leaves its ratio undefined (a failed resample). Effect: the larger
    ratio. Supported: ≤ `supported_ratio`; partly: < `partly_ratio`; else not supported. Interval: windows ×
    draws resampled jointly (both axes)."""
    same, rand = np.asarray(same_heads, float), np.asarray(random, float)
    W, D = same.shape
    units = {"selected": np.repeat(np.asarray(selected, float)[:, None], D, 1), "same": same, "random": rand}

    def effects(u, _th):
        sel = float(u["selected"][:, 0].mean())
        same_mean, random_mean = float(u["same"].mean()), float(u["random"].mean())
        ratios = [sel / m if m > 0 else math.nan for m in (same_mean, random_mean)]
        return {"ratio": max(ratios) if all(math.isfinite(r) for r in ratios) else math.nan,
                "ratio_same_heads": ratios[0], "ratio_random": ratios[1], "delta_selected": sel,
                "delta_same_heads_mean": same_mean, "delta_random_mean": random_mean}  # fmt: skip

    if same.shape != rand.shape:
        raise ValueError(f"same-heads {same.shape} and random {rand.shape} controls need one (windows, draws) shape")
    return judge("sink_ablation", model, units, effects, _decide_ratio, ABLATION, over="windows × draws",
                 min_units=(MIN_WINDOWS, MIN_DRAWS), crossed=True, seed=seed,
                 evidence={"measured_at": MEASURED_AT["sink_ablation"], **(extra or {})})  # fmt: skip


def ablation_verdict(claim: str, model: str, delta_selected: float, delta_random: Sequence[float],
                     extra: dict | None = None, seed: int = 0) -> Verdict:  # fmt: skip
    """Claim `dormant_heads`: ratio = Δloss of the selected heads / mean Δloss of random head sets of the same
    size. Supported: ratio ≤ `supported_ratio`; partly: < `partly_ratio`; not measurable when the random sets
    do not raise the loss (a failed resample). Interval over the random draws (the ablation pass keeps no
    per-window losses)."""
    randoms = _finite(delta_random)

    def effects(u, _th):
        mean = float(u["random"].mean())
        return {"ratio": delta_selected / mean if mean > 0 else math.nan, "delta_random_mean": mean}

    evidence = {"delta_selected": delta_selected, "delta_random": randoms.tolist(),
                "measured_at": MEASURED_AT.get(claim, ""), **(extra or {})}  # fmt: skip
    return judge(claim, model, {"random": randoms}, effects, _decide_ratio, ABLATION, over="random draws",
                 min_units=MIN_DRAWS, seed=seed, evidence=evidence)  # fmt: skip


DORMANT_AHON_LN = 0.5  # the dormancy cut of the ablation's head set is by rank (lowest 10 %), not by this value
DORMANT_CURVE = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def dormant_curve(ahon_ln: Sequence[float]) -> dict[str, float]:
    """Fraction of heads with AHON-LN ≤ x for x in `DORMANT_CURVE` (Sandoval-Segura et al. sweep the cut)."""
    values = _finite(ahon_ln)
    return {f"{x:g}": float((values <= x).mean()) if values.size else math.nan for x in DORMANT_CURVE}
