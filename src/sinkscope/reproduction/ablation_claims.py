"""Section 3's ablation claims: `sink_ablation` (zeroing the sink-like heads on their sink queries changes the loss
less than matched controls, in either direction) and `dormant_heads` (zeroing the heads of lowest AHON-LN costs less than random head sets),
with the dormancy curve beside them. Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the
claims' words in `reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from sinkscope.reproduction.ablation_variants import Variants
from sinkscope.reproduction.minima import MIN_DRAWS, MIN_WINDOWS
from sinkscope.reproduction.verdicts import (
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SCALES,
    SUPPORTED,
    Verdict,
    judge,
)

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
                evidence: dict, seed: int = 0, varied: Mapping[str, float] | None = None,
                variants: Variants | None = None, two_sided: bool = False) -> Verdict:  # fmt: skip
    """An ablation claim from per-window Δloss (nats/token): `selected` (W,) the chosen heads ablated, `controls`
    {name: (W, D)} D draws of each control on the same W windows. Ratio per control = mean Δ(selected) / mean
    Δ(control), with `two_sided` = |mean Δ(selected)| / mean Δ(control) (a change in either direction counts:
    a loss that falls by much is no "small change"; `selected_lowers_loss` = 1 reports that direction under its
    own name); a control that does not raise the loss leaves its ratio undefined (a failed resample). Effect:
    the larger ratio (the claim must hold against every control). Supported: ≤ `supported_ratio`; partly: <
    `partly_ratio`; else not supported. Interval: windows × draws resampled jointly (both axes). The number of
    draws enters the sensitivity at half (the first D/2 draws); doubling it needs more draws than were measured.

    `varied` {threshold: value} names the thresholds the measurement itself applied (the head fraction, the
    sink-query δ); `variants` {(threshold, scale): {"selected": (W,), control: (W, D')}} holds the same
    ablation re-measured at that threshold × scale (`reproduction.ablation_variants`). The sensitivity step
    reads a variant's point ratio when it varies its threshold; a scale without a variant is recorded as not
    varied (the reason in `fixed[threshold]`)."""
    controls = {name: np.asarray(value, float) for name, value in controls.items()}
    shapes = {value.shape for value in controls.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"{claim}: the controls need one (windows, draws) shape, got {sorted(shapes)}")
    W, D = shapes.pop()
    units = {"selected": np.repeat(np.asarray(selected, float)[:, None], D, 1), **controls}
    varied, variants = dict(varied or {}), dict(variants or {})

    def measured(u, th):  # the units measured at th's values of the varied thresholds (None: not measured)
        moved = [(name, round(th[name] / value, 6)) for name, value in varied.items()
                 if name in th and not math.isclose(th[name], value)]  # fmt: skip
        if not moved:
            return u
        data = variants.get(moved[0])
        if data is None or len(moved) > 1:
            return None
        draws = np.shape(data[next(iter(controls))])[1]
        return {"selected": np.repeat(np.asarray(data["selected"], float)[:, None], draws, 1),
                **{name: np.asarray(data[name], float) for name in controls}}  # fmt: skip

    def effects(u, th):
        u = measured(u, th)
        if u is None:
            return {"ratio": math.nan}
        n = max(1, int(th["n_draws"]))  # the first n draws (of a resample's draws)
        sel = float(u["selected"][:, 0].mean())
        size = abs(sel) if two_sided else sel
        means = {name: float(u[name][:, :n].mean()) for name in controls}
        ratios = {name: size / m if m > 0 else math.nan for name, m in means.items()}
        finite = all(math.isfinite(r) for r in ratios.values())
        return {"ratio": max(ratios.values()) if finite else math.nan, "delta_selected": sel,
                "selected_lowers_loss": float(sel < 0),
                **{f"ratio_{name}": r for name, r in ratios.items()},
                **{f"delta_{name}_mean": m for name, m in means.items()}}  # fmt: skip

    thresholds = ABLATION | {"n_draws": float(D)}
    fixed = fixed | {"n_draws×2": f"only {D} draws of each control were measured"}
    for name, value in varied.items():
        missing = [scale for scale in SCALES if (name, scale) not in variants]
        if len(missing) < len(SCALES):  # measured at some scale: a threshold of the sensitivity step
            thresholds[name] = value
            why = fixed.pop(name, f"{name} was measured at one value only")
            fixed |= {f"{name}×{scale:g}": why for scale in missing}
    measured_at = {}  # each variant's point numbers, as evidence beside the sensitivity's verdicts
    for (name, scale), data in sorted(variants.items()):
        if name in thresholds:
            point = effects(units, thresholds | {name: varied[name] * scale})
            measured_at[f"{name}×{scale:g}"] = point | {"n_heads": int(data["n_heads"]) if "n_heads" in data else None,
                                                         "draws": int(np.shape(data[next(iter(controls))])[1])}  # fmt: skip
    evidence = dict(evidence) | ({"variants": measured_at} if measured_at else {})
    evidence["ratio_of"] = "|mean Δ(selected)| / mean Δ(control)" if two_sided else "mean Δ(selected) / mean Δ(control)"
    verdict = judge(claim, model, units, effects, _decide_ratio, thresholds, over="windows × draws",
                    min_units=(MIN_WINDOWS, MIN_DRAWS), crossed=True, seed=seed, fixed=fixed, evidence=evidence,
                    decides_on=("ratio",))  # fmt: skip
    if two_sided and verdict.evidence.get("selected_lowers_loss") == 1.0:
        note = (f"zeroing them lowers the loss (Δ = {verdict.evidence['delta_selected']:.3g} nats/token): judged by "
                "the size of the change")  # fmt: skip
        return replace(verdict, reason="; ".join(part for part in (note, verdict.reason) if part))
    return verdict


HEAD_FRACTION_FIXED = ("the head fraction ({fraction:.0%} of heads) is fixed by the ablation pass: another fraction "
                       "needs another set and its controls (the sensitivity passes of `ablate-sensitivity/`, "
                       "not run here: --quick, or a run without that section)")  # fmt: skip
SINK_QUERY_DELTA_FIXED = ("δ = {delta:g} picks the zeroed sink queries in the sink-query pass: another δ needs "
                          "another pass (the sensitivity passes of `ablate-sensitivity/`, not run here: --quick, or "
                          "a run without that section)")  # fmt: skip


def sink_ablation_verdict(model: str, selected: np.ndarray, same_heads: np.ndarray, random: np.ndarray,
                          extra: dict | None = None, seed: int = 0, fraction: float = 0.1, delta: float = 0.1,
                          variants: Variants | None = None) -> Verdict:  # fmt: skip
    """Claim `sink_ablation` (`ratio_claim`, two-sided: the size |Δ| of the change in either direction against
    the controls' Δ): `selected` the sink-like heads zeroed on their sink queries (A[t,0] ≥ 1 − `delta`); controls `same_heads` (W, D), the same heads zeroed on as many of their non-sink queries (same
    heads, so same layers: the within-layer control), and `random` (W, D), matched random head-and-query
    sets. `variants`: the same at head fraction and δ × ½, × 2 (`reproduction.ablation_variants`)."""
    fixed = {"head_fraction": HEAD_FRACTION_FIXED.format(fraction=fraction),
             "sink_query_delta": SINK_QUERY_DELTA_FIXED.format(delta=delta)}  # fmt: skip
    return ratio_claim("sink_ablation", model, selected, {"same_heads": same_heads, "random": random}, fixed,
                       dict(extra or {}), seed, {"head_fraction": fraction, "sink_query_delta": delta},
                       variants, two_sided=True)  # fmt: skip


def dormant_heads_verdict(model: str, selected: np.ndarray, layer_matched: np.ndarray, random: np.ndarray,
                          extra: dict | None = None, seed: int = 0, fraction: float = 0.1,
                          variants: Variants | None = None) -> Verdict:  # fmt: skip
    """Claim `dormant_heads` (`ratio_claim`): `selected` (W,) the heads of lowest AHON-LN zeroed; controls
    `layer_matched` (W, D), random head sets with the dormant set's count in every layer (the within-layer
    comparison: depth cannot stand in for dormancy), and `random` (W, D), random head sets of the same size.
    `variants`: the same at head fraction × ½, × 2 (`reproduction.ablation_variants`)."""
    fixed = {"head_fraction": HEAD_FRACTION_FIXED.format(fraction=fraction)}
    return ratio_claim("dormant_heads", model, selected, {"layer_matched": layer_matched, "random": random}, fixed,
                       dict(extra or {}), seed, {"head_fraction": fraction}, variants)  # fmt: skip


DORMANT_AHON_LN = 0.5  # the dormancy cut of the ablation's head set is by rank (lowest 10 %), not by this value
DORMANT_CURVE = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def dormant_curve(ahon_ln: Sequence[float]) -> dict[str, float]:
    """Fraction of heads with AHON-LN ≤ x for x in `DORMANT_CURVE` (Sandoval-Segura et al. sweep the cut)."""
    values = _finite(ahon_ln)
    return {f"{x:g}": float((values <= x).mean()) if values.size else math.nan for x in DORMANT_CURVE}
