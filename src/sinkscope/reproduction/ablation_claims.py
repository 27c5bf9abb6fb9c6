"""Section 3's ablation claims: `sink_ablation` (zeroing the sink-like heads on their sink queries costs less
than matched controls) and `dormant_heads` (zeroing the heads of lowest AHON-LN costs less than random head sets),
with the dormancy curve beside them. Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the
claims' words in `reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sinkscope.reproduction.minima import MIN_DRAWS, MIN_WINDOWS
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


def ratio_claim(claim: str, model: str, selected: np.ndarray, controls: dict[str, np.ndarray], fixed: dict[str, str],
                evidence: dict, seed: int = 0) -> Verdict:  # fmt: skip
    """An ablation claim from per-window Δloss (nats/token): `selected` (W,) the chosen heads ablated, `controls`
    {name: (W, D)} D draws of each control on the same W windows. Ratio per control = mean Δ(selected) / mean
    Δ(control); a control that does not raise the loss leaves its ratio undefined (a failed resample). Effect:
    the larger ratio (the claim must hold against every control). Supported: ≤ `supported_ratio`; partly: <
    `partly_ratio`; else not supported. Interval: windows × draws resampled jointly (both axes). The number of
    draws enters the sensitivity at half (the first D/2 draws); doubling it needs more draws than were measured,
    as does another head fraction or sink-query δ (`fixed`, recorded as not varied)."""
    controls = {name: np.asarray(value, float) for name, value in controls.items()}
    shapes = {value.shape for value in controls.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"{claim}: the controls need one (windows, draws) shape, got {sorted(shapes)}")
    W, D = shapes.pop()
    units = {"selected": np.repeat(np.asarray(selected, float)[:, None], D, 1), **controls}

    def effects(u, th):
        n = max(1, int(th["n_draws"]))  # the first n draws (of a resample's draws)
        sel = float(u["selected"][:, 0].mean())
        means = {name: float(u[name][:, :n].mean()) for name in controls}
        ratios = {name: sel / m if m > 0 else math.nan for name, m in means.items()}
        finite = all(math.isfinite(r) for r in ratios.values())
        return {"ratio": max(ratios.values()) if finite else math.nan, "delta_selected": sel,
                **{f"ratio_{name}": r for name, r in ratios.items()},
                **{f"delta_{name}_mean": m for name, m in means.items()}}  # fmt: skip

    thresholds = ABLATION | {"n_draws": float(D)}
    fixed = fixed | {"n_draws×2": f"only {D} draws of each control were measured"}
    return judge(claim, model, units, effects, _decide_ratio, thresholds, over="windows × draws",
                 min_units=(MIN_WINDOWS, MIN_DRAWS), crossed=True, seed=seed, fixed=fixed, evidence=evidence)  # fmt: skip


HEAD_FRACTION_FIXED = ("the head fraction ({fraction:.0%} of heads) is fixed by the ablation pass: another fraction "
                       "needs another set and its controls (1 + 2 × draws loss passes over the windows)")  # fmt: skip


def sink_ablation_verdict(model: str, selected: np.ndarray, same_heads: np.ndarray, random: np.ndarray,
                          extra: dict | None = None, seed: int = 0, fraction: float = 0.1, delta: float = 0.1
                          ) -> Verdict:  # fmt: skip
    """Claim `sink_ablation` (`ratio_claim`): `selected` the sink-like heads zeroed on their sink queries (A[t,0] ≥
    1 − `delta`); controls `same_heads` (W, D), the same heads zeroed on as many of their non-sink queries (same
    heads, so same layers: the within-layer control), and `random` (W, D), matched random head-and-query
    sets."""
    fixed = {"head_fraction": HEAD_FRACTION_FIXED.format(fraction=fraction),
             "sink_query_delta": f"δ = {delta:g} picks the zeroed sink queries in the sink-query pass: another δ "
                                 "needs another pass (1 + 2 × draws loss passes)"}  # fmt: skip
    return ratio_claim("sink_ablation", model, selected, {"same_heads": same_heads, "random": random}, fixed,
                       dict(extra or {}), seed)  # fmt: skip


def dormant_heads_verdict(model: str, selected: np.ndarray, layer_matched: np.ndarray, random: np.ndarray,
                          extra: dict | None = None, seed: int = 0, fraction: float = 0.1) -> Verdict:  # fmt: skip
    """Claim `dormant_heads` (`ratio_claim`): `selected` (W,) the heads of lowest AHON-LN zeroed; controls
    `layer_matched` (W, D), random head sets with the dormant set's count in every layer (the within-layer
    comparison: depth cannot stand in for dormancy), and `random` (W, D), random head sets of the same size."""
    fixed = {"head_fraction": HEAD_FRACTION_FIXED.format(fraction=fraction)}
    return ratio_claim("dormant_heads", model, selected, {"layer_matched": layer_matched, "random": random}, fixed,
                       dict(extra or {}), seed)  # fmt: skip


DORMANT_AHON_LN = 0.5  # the dormancy cut of the ablation's head set is by rank (lowest 10 %), not by this value
DORMANT_CURVE = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def dormant_curve(ahon_ln: Sequence[float]) -> dict[str, float]:
    """Fraction of heads with AHON-LN ≤ x for x in `DORMANT_CURVE` (Sandoval-Segura et al. sweep the cut)."""
    values = _finite(ahon_ln)
    return {f"{x:g}": float((values <= x).mean()) if values.size else math.nan for x in DORMANT_CURVE}
