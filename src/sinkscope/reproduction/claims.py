"""Each claim's decision: plain numbers in (no model, no I/O), a `Verdict` out by the steps of
`reproduction.verdicts` (stated minimum of units, decision on effect sizes, bootstrap over the right unit, every
threshold varied). The claims' words, tests and controls are in `reproduction.claim_texts`.

Thresholds are ours (the paper states its findings in words: "non-positive", "rarely met", "favoured"); each
is reported beside the verdict with the verdicts at half and double it (fractions on the odds scale,
`reproduction.verdicts`; docs/reproduction.md lists them per claim). Thresholds fixed by a measurement (the δ
that picks an ablation's sink queries, the 10 % head fraction, the number of controls, the costs' T) cannot be
re-decided from the same numbers; `MEASURED_AT` names them and the docs say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from sinkscope.reproduction.claim_texts import CLAIMS, SECTION_OF, with_claim_text
from sinkscope.reproduction.strata import (
    rowwise_spearman,
    spearman,
    stratified_difference,
    within_layer_permutation_p,
)
from sinkscope.reproduction.verdicts import (
    DESCRIPTIVE,
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    VERDICTS,
    Verdict,
    graded,
    judge,
    too_few,
)

__all__ = ["CLAIMS", "DESCRIPTIVE", "NOT_MEASURABLE", "NOT_SUPPORTED", "PARTLY", "SECTION_OF", "SUPPORTED",
           "VERDICTS", "Verdict", "with_claim_text"]  # fmt: skip

MIN_WINDOWS = 8  # windows a per-window verdict needs
MIN_DRAWS = 20  # random draws an ablation's control needs
MIN_HEADS = 20  # heads a per-head fraction needs
MIN_LAYERS = 4  # middle layers the certificates need
MIN_CONTROLS = 20  # random context tokens the certificates need
MIN_STRATA = 2  # layers holding both head classes a within-layer comparison needs
MIN_COST_WINDOWS = 4  # windows of exact cost programs (each layer × T is a convex program)

MEASURED_AT = {
    "sink_ablation": "δ = 0.1 (sink queries) and the 10 % head fraction: fixed by the ablation pass",
    "dormant_heads": "the 10 % head fraction: fixed by the ablation pass",
    "representability": "the number of controls and the certificate sample: fixed by the certificate pass",
    "cost_real_layers": "T = 8, 16, 32 and the layer stride: every T measured is reported",
    "weights_low_rank": "ε = 0.3 of the head class sink: fixed by the analysis (weights_bos_alignment too)",
}


def _finite(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    return array[np.isfinite(array)]


def middle_layers(n_layers: int, lower: float = 0.25, upper: float = 0.75) -> list[int]:
    """Layers l with lower ≤ l / (L-1) ≤ upper (at least one, for L ≥ 1)."""
    if n_layers <= 1:
        return list(range(n_layers))
    chosen = [layer for layer in range(n_layers) if lower <= layer / (n_layers - 1) <= upper]
    return chosen or [n_layers // 2]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


# --- section 1 ---------------------------------------------------------------------------------------------

GEOMETRY = {"positive_token_tol": 0.05, "failing_layer_tol": 0.2, "partly_layer_frac": 0.2, "middle_margin": 0.25}


def geometry_verdict(model: str, counts: Mapping[str, np.ndarray], tokens: int, seed: int = 0) -> Verdict:
    """Claim `geometry` from per-window counts (W, L) of tokens with cos ≤ 0: `z`, `h` (BOS against the `tokens`
    others, on the attention input and the residual stream) and `z_control`, `h_control` (a random context token
    against `tokens - 1` others). A layer holds when BOS's pooled fraction is ≥ 1 − `positive_token_tol` and
    the control's is not. Effect: the share of middle layers (depth `middle_margin` … 1 − `middle_margin`)
    holding, the smaller of z and h. Supported: ≥ 1 − `failing_layer_tol`; partly: z or h ≥ `partly_layer_frac`.
    Interval over windows."""
    units = {name: np.asarray(value, float) for name, value in counts.items()}
    reps = [rep for rep in ("z", "h") if rep in units]
    if not reps or units[reps[0]].ndim != 2:
        return Verdict("geometry", model, NOT_MEASURABLE, {}, GEOMETRY, "no per-window BOS cosines")

    def effects(u, th):
        L = u[reps[0]].shape[1]
        middle = middle_layers(L, th["middle_margin"], 1 - th["middle_margin"])
        out = {}
        for rep in reps:
            frac = u[rep].sum(0) / (len(u[rep]) * tokens)
            ctrl = u[f"{rep}_control"].sum(0) / (len(u[rep]) * (tokens - 1))
            holds = (frac >= 1 - th["positive_token_tol"]) & ~(ctrl >= 1 - th["positive_token_tol"])
            out |= {f"middle_layers_holding_{rep}": float(holds[middle].mean()),
                    f"all_layers_holding_{rep}": float(holds.mean()),
                    f"control_layers_holding_{rep}": float((ctrl[middle] >= 1 - th["positive_token_tol"]).mean()),
                    f"middle_mean_nonpos_frac_{rep}": float(frac[middle].mean())}  # fmt: skip
        shares = [out[f"middle_layers_holding_{rep}"] for rep in reps]
        return {"middle_layers_holding": min(shares), "middle_layers_holding_best": max(shares), **out}

    def decide(e, th):
        if e["middle_layers_holding"] >= 1 - th["failing_layer_tol"]:
            return SUPPORTED
        return PARTLY if e["middle_layers_holding_best"] >= th["partly_layer_frac"] else NOT_SUPPORTED

    return judge("geometry", model, units, effects, decide, GEOMETRY, over="windows", min_units=MIN_WINDOWS,
                 seed=seed, fractions=tuple(GEOMETRY), evidence={"representations": reps})  # fmt: skip


REPRESENTABILITY = {"failing_layer_tol": 0.2, "partly_layer_frac": 0.2, "beaten_control_frac": 0.95}


def representability_verdict(model: str, layers: Sequence[Mapping], width: int, seed: int = 0) -> Verdict:
    """Claim `representability` from per-middle-layer certificates on raw inputs `{layer, n_contexts, h1, h2,
    gamma2_rel, control_gamma2_rel (list), n_controls}` (γ₂ / ‖z‖ of BOS and of each random context token).
    A layer is beyond its control when H1 and H2 hold and BOS's γ₂/‖z‖ exceeds at least `beaten_control_frac`
    of the controls'. Supported: ≥ 1 − `failing_layer_tol` of the layers are; partly: H1 and H2 hold in ≥
    `partly_layer_frac` of them (BOS passes a test random tokens pass too); else not supported. Interval over
    layers. Needs more tokens than the `width`, ≥ `MIN_CONTROLS` controls and ≥ `MIN_LAYERS` layers."""
    layers = list(layers)
    if not layers:
        return Verdict("representability", model, NOT_MEASURABLE, {}, REPRESENTABILITY, "no certificates")
    n = min(int(row["n_contexts"]) for row in layers)
    controls = min(len(row["control_gamma2_rel"]) for row in layers)
    evidence = {"n_contexts": n, "width": width, "n_controls": controls}
    if n <= width:
        return Verdict("representability", model, NOT_MEASURABLE, evidence, REPRESENTABILITY, f"the certificate "
                       f"sample ({n} tokens) is not larger than the model width ({width}): any token would pass")  # fmt: skip
    if controls < MIN_CONTROLS:
        return too_few("representability", model, "control tokens", controls, MIN_CONTROLS, evidence)
    holds = np.array([bool(row["h1"]) and bool(row["h2"]) for row in layers], float)
    beaten = np.array([float(np.mean(float(row["gamma2_rel"]) > np.asarray(row["control_gamma2_rel"], float)))
                       for row in layers])  # fmt: skip
    ranks = [1 + int(np.sum(np.asarray(row["control_gamma2_rel"], float) >= float(row["gamma2_rel"])))
             for row in layers]  # fmt: skip

    def effects(u, th):
        return {"layers_beyond_control": float(np.mean(u["holds"].astype(bool) & (u["beaten"] >= th["beaten_control_frac"]))),
                "layers_representable": float(u["holds"].mean()), "mean_controls_beaten": float(u["beaten"].mean())}  # fmt: skip

    def decide(e, th):
        if e["layers_beyond_control"] >= 1 - th["failing_layer_tol"]:
            return SUPPORTED
        return PARTLY if e["layers_representable"] >= th["partly_layer_frac"] else NOT_SUPPORTED

    evidence |= {"layers": [int(row["layer"]) for row in layers], "bos_rank": ranks,
                 "gamma2_rel_bos": [float(r["gamma2_rel"]) for r in layers],
                 "gamma2_rel_control_median": [float(np.median(r["control_gamma2_rel"])) for r in layers],
                 "gamma2_rel_control_max": [float(np.max(r["control_gamma2_rel"])) for r in layers]}  # fmt: skip
    return judge("representability", model, {"holds": holds, "beaten": beaten}, effects, decide, REPRESENTABILITY,
                 over="middle layers", min_units=MIN_LAYERS, fractions=tuple(REPRESENTABILITY), seed=seed,
                 evidence=evidence)  # fmt: skip


# --- section 2 ---------------------------------------------------------------------------------------------

OVERSMOOTHING = {"counteract_tol": 0.2, "partly_frac": 0.5, "rise_min": 0.001}


def oversmoothing_verdict(model: str, observed_rise: Sequence[float], dense_more: Sequence[bool],
                          layers: Sequence[int], seed: int = 0) -> Verdict:  # fmt: skip
    """Claim `oversmoothing` from per-head observed rises of the mean pairwise cosine (λ: 0 → 1). A head
    oversmooths when its rise exceeds `rise_min`. Supported: ≥ 1 − `counteract_tol` of heads ("rarely" = at most
    one head in five counteracts); partly: ≥ `partly_frac`. The measured-moment predictor (2b + c > 0) is a
    consistency check beside it, never deciding. Interval over heads, resampled within layers."""
    units = {"rise": np.asarray(observed_rise, float), "dense": np.asarray(dense_more, float)}
    if units["rise"].size < MIN_HEADS:
        return too_few("oversmoothing", model, "heads", int(units["rise"].size), MIN_HEADS)

    def effects(u, th):
        rises = u["rise"] > th["rise_min"]
        return {"frac_observed_rise": float(rises.mean()), "frac_dense_more_measured": float(u["dense"].mean()),
                "consistency_predictor_vs_observed": float((u["dense"].astype(bool) == (u["rise"] > 0)).mean())}  # fmt: skip

    def decide(e, th):
        return graded(e["frac_observed_rise"], 1 - th["counteract_tol"], th["partly_frac"])

    return judge("oversmoothing", model, units, effects, decide, OVERSMOOTHING, over="heads", min_units=MIN_HEADS,
                 strata=np.asarray(layers), seed=seed, fractions=("counteract_tol", "partly_frac"),
                 evidence={"n_heads": int(units["rise"].size)})  # fmt: skip


# --- section 3 ---------------------------------------------------------------------------------------------

SWITCH = {"delta": 0.1, "miss_tol": 0.1, "partly_min": 0.5}
GRID = (0.5, 1.0, 2.0)  # the δ (and τ) scales per-window tables are counted at
# τ of the switch curves: dense where P(sink | off) and P(off | sink) cross on the embedded models (0.1 … 0.2)
TAU_CURVE = (0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.4, 0.6, 0.8, 1.0)


def switch_curves(table: np.ndarray) -> dict[str, np.ndarray]:
    """From pooled 2×2 counts (K, 4) at K values of τ (cells off·sink, off·no sink, on·sink, on·no sink): the
    curves P(sink | off), P(off | sink), P(off | no sink), each (K,), NaN where undefined."""
    off_sink, off_nosink, on_sink, on_nosink = (table[:, i].astype(float) for i in range(4))
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"p_sink_given_off": np.where(off_sink + off_nosink > 0, off_sink / (off_sink + off_nosink), np.nan),
                "p_off_given_sink": np.where(off_sink + on_sink > 0, off_sink / (off_sink + on_sink), np.nan),
                "p_off_given_nosink": np.where(off_nosink + on_nosink > 0, off_nosink / (off_nosink + on_nosink),
                                               np.nan)}  # fmt: skip


def switch_verdict(model: str, counts: np.ndarray, taus: Sequence[float] = TAU_CURVE, delta: float = 0.1,
                   seed: int = 0) -> Verdict:  # fmt: skip
    """Claim `switch` from per-window 2×2 tables `counts` (W, δ scale, τ, 4) at δ × `GRID` (or δ only: an axis of
    length 1, then halving and doubling δ is not measurable) and τ over `taus`. Effect: the best τ's smaller
    conditional, max_τ min(P(sink | off), P(off | sink)). Supported: ≥ 1 − `miss_tol` (both directions hold at
    one τ); partly: ≥ `partly_min`; not measurable without a switched-off or a sinking query."""
    thresholds = SWITCH | {"delta": delta}
    counts = np.asarray(counts, float)
    deltas = GRID if counts.shape[1] == len(GRID) else (1.0,)

    def effects(u, th):
        scale = th["delta"] / delta
        if not any(math.isclose(scale, d) for d in deltas):
            return {"best_min_conditional": math.nan}
        index = [i for i, d in enumerate(deltas) if math.isclose(scale, d)][0]
        curves = switch_curves(u["counts"][:, index].sum(0))
        smaller = np.minimum(curves["p_sink_given_off"], curves["p_off_given_sink"])  # NaN where either is
        if not np.isfinite(smaller).any():
            return {"best_min_conditional": math.nan}
        best = int(np.nanargmax(smaller))
        return {"best_min_conditional": float(smaller[best]), "tau_best": float(taus[best]),
                **{f"{name}_at_best": float(curve[best]) for name, curve in curves.items()}}  # fmt: skip

    def decide(e, th):
        return graded(e["best_min_conditional"], 1 - th["miss_tol"], th["partly_min"])

    return judge("switch", model, {"counts": counts}, effects, decide, thresholds, over="windows",
                 min_units=MIN_WINDOWS, seed=seed, fractions=("miss_tol", "partly_min"),
                 evidence={"taus": list(taus)})  # fmt: skip


VALUE_DRAIN = {"rho_min": 0.3, "drain_max": 0.5, "sink_head_hard_frac": 0.5}


def value_drain_verdict(model: str, drains: np.ndarray, hard_sink: np.ndarray, queries: int, seed: int = 0
                        ) -> Verdict:  # fmt: skip
    """Claim `value_drain` from per-window drains (W, L, KV) and hard-sink counts (W, L, H) out of `queries`
    per window. Per KV group: the largest hard-sink fraction of its query heads and the mean drain. Effect:
    Spearman ρ of the two over all groups (negative: sinking goes with a small v_0). Supported: ρ ≤ −`rho_min`,
    the within-layer ρ not positive (where layers have ≥ 3 groups), and the groups with a head hard-sink on ≥
    `sink_head_hard_frac` of queries have median drain ≤ `drain_max`; partly: ρ < 0; else not supported."""
    drains, hard = np.asarray(drains, float), np.asarray(hard_sink, float)
    W, L, KV = drains.shape
    group = hard.shape[2] // KV

    def effects(u, th):
        frac = (u["hard"].sum(0) / (len(u["hard"]) * queries)).reshape(L, KV, group).max(-1).ravel()
        drain = u["drains"].mean(0).ravel()
        if np.ptp(frac) == 0 or np.ptp(drain) == 0:
            return {"rho_all_groups": math.nan}
        within, used = rowwise_spearman(frac.reshape(L, KV), drain.reshape(L, KV))
        sink = frac >= th["sink_head_hard_frac"]
        return {"rho_all_groups": spearman(frac, drain), "rho_within_layers": within,
                "layers_within": float(used), "n_sink_groups": float(sink.sum()),
                "median_drain_sink_groups": float(np.median(drain[sink])) if sink.any() else math.nan,
                "median_drain_other_groups": float(np.median(drain[~sink])) if (~sink).any() else math.nan}  # fmt: skip

    def decide(e, th):
        rho = e["rho_all_groups"]
        if not math.isfinite(rho):
            return NOT_MEASURABLE
        within_ok = not math.isfinite(e["rho_within_layers"]) or e["rho_within_layers"] <= 0
        small = e["median_drain_sink_groups"] <= th["drain_max"]  # False when NaN (no sink group)
        if rho <= -th["rho_min"] and within_ok and small:
            return SUPPORTED
        return PARTLY if rho < 0 else NOT_SUPPORTED

    return judge("value_drain", model, {"drains": drains, "hard": hard}, effects, decide, VALUE_DRAIN,
                 over="windows", min_units=MIN_WINDOWS, seed=seed, fractions=("sink_head_hard_frac",),
                 evidence={"n_groups": L * KV, "groups_per_layer": KV})  # fmt: skip


ROUTE_CLAIM = {"tau": 0.1, "delta": 0.1, "rare_tol": 0.1, "partly_tol": 0.5}


def switch_routes_verdict(model: str, counts: np.ndarray, names: Sequence[str], sink_routes: Sequence[bool],
                          tau: float = 0.1, delta: float = 0.1, extra: dict | None = None, seed: int = 0
                          ) -> Verdict:  # fmt: skip
    """Claim `switch_routes` from per-window route counts (W, δ scale, τ scale, R + 1) at δ, τ × `GRID`
    (`stats.switch_routes.classify`; the last entry counts unexplained queries). Effect: the share of
    switched-off queries on a non-BOS route. Supported: ≤ `rare_tol`; partly: ≤ `partly_tol`; else not
    supported; not measurable without a switched-off query. Interval over windows."""
    thresholds = ROUTE_CLAIM | {"tau": tau, "delta": delta}
    counts = np.asarray(counts, float)
    bos = np.array([*sink_routes, False], bool)
    labels = [*names, "unexplained"]

    def effects(u, th):
        i = [k for k, d in enumerate(GRID) if math.isclose(th["delta"] / delta, d)]
        j = [k for k, t in enumerate(GRID) if math.isclose(th["tau"] / tau, t)]
        if not (i and j):
            return {"non_bos_route_frac": math.nan}
        table = u["counts"][:, i[0], j[0]].sum(0)
        n_off = float(table.sum())
        hard = float(table[labels.index("bos_sink")]) if "bos_sink" in labels else 0.0
        shares = {f"frac_{name}": _ratio(float(n), n_off) for name, n in zip(labels, table)}
        return {"non_bos_route_frac": _ratio(float(table[~bos].sum()), n_off),
                "non_bos_among_non_hard_sink": _ratio(float(table[~bos].sum()), n_off - hard),
                "n_switched_off": n_off, **shares}  # fmt: skip

    def decide(e, th):
        return graded(e["non_bos_route_frac"], th["rare_tol"], th["partly_tol"], higher_is_better=False)

    return judge("switch_routes", model, {"counts": counts}, effects, decide, thresholds, over="windows",
                 min_units=MIN_WINDOWS, seed=seed, fractions=("rare_tol", "partly_tol"),
                 evidence={"routes": labels, **(extra or {})})  # fmt: skip


def mlp_like_verdict(model: str, counts: np.ndarray, queries: int, seed: int = 0) -> Verdict:
    """Claim `mlp_like`, descriptive: per-window counts (W, L) of queries on which every head is hard-sink or
    hard-diagonal, out of `queries` per window; the largest layer fraction with its interval."""
    counts = np.asarray(counts, float)

    def effects(u, _th):
        frac = u["counts"].sum(0) / (len(u["counts"]) * queries)
        return {"max_layer_frac": float(frac.max()), "argmax_layer": float(np.argmax(frac)),
                "mean_layer_frac": float(frac.mean())}  # fmt: skip

    if counts.size == 0:
        return Verdict("mlp_like", model, NOT_MEASURABLE, {}, {}, "no per-layer MLP-like counts")
    return judge("mlp_like", model, {"counts": counts}, effects, lambda e, th: DESCRIPTIVE, {}, over="windows",
                 min_units=MIN_WINDOWS, seed=seed, descriptive=True)  # fmt: skip


ABLATION = {"supported_ratio": 0.5, "partly_ratio": 1.0}


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



# --- section 4 ---------------------------------------------------------------------------------------------

COST_CLOSED = {"exponent_tol": 0.1, "exact_rel_tol": 1e-3}


def cost_closed_forms_verdict(model: str, sink_exponent: float, diagonal_exponent: float,
                              exact_rel_error: float) -> Verdict:  # fmt: skip
    """Claim `cost_closed_forms` (exact): fitted exponents of nuclear cost ~ T^a and the largest relative gap
    between the exact programs and the closed forms. Supported: exponents within `exponent_tol` of ½ and 1 and
    the programs within `exact_rel_tol`; partly: the exponents order as claimed; else not supported."""

    def effects(_u, _th):
        return {"sink_exponent": sink_exponent, "diagonal_exponent": diagonal_exponent,
                "exact_rel_error": exact_rel_error}  # fmt: skip

    def decide(e, th):
        if not (math.isfinite(sink_exponent) and math.isfinite(diagonal_exponent)):
            return NOT_MEASURABLE
        close = abs(sink_exponent - 0.5) <= th["exponent_tol"] and abs(diagonal_exponent - 1) <= th["exponent_tol"]
        exact = math.isfinite(exact_rel_error) and exact_rel_error <= th["exact_rel_tol"]
        return SUPPORTED if close and exact else PARTLY if sink_exponent < diagonal_exponent else NOT_SUPPORTED

    return judge("cost_closed_forms", model, {}, effects, decide, COST_CLOSED,
                 over="closed forms and exact programs: no sampling interval")  # fmt: skip


COST_REAL = {"losing_pair_tol": 0.2, "partly_frac": 0.5}


def cost_real_verdict(model: str, wins: np.ndarray, Ts: Sequence[int], extra: dict | None = None, seed: int = 0
                      ) -> Verdict:  # fmt: skip
    """Claim `cost_real_layers` from per-window shares (W, len(Ts)) of the layers where the sink is cheaper
    (feasible and cheaper, or the diagonal infeasible) at each context length T. Effect: the mean share over
    windows and T. Supported: ≥ 1 − `losing_pair_tol`, and at every T; partly: ≥ `partly_frac`. Interval over
    windows."""
    wins = np.asarray(wins, float)

    def effects(u, _th):
        per_t = u["wins"].mean(0)
        return {"sink_cheaper_frac": float(per_t.mean()), "worst_T_frac": float(per_t.min()),
                **{f"sink_cheaper_frac_T{T}": float(x) for T, x in zip(Ts, per_t)}}  # fmt: skip

    def decide(e, th):
        if e["sink_cheaper_frac"] >= 1 - th["losing_pair_tol"] and e["worst_T_frac"] >= 1 - th["losing_pair_tol"]:
            return SUPPORTED
        return PARTLY if e["sink_cheaper_frac"] >= th["partly_frac"] else NOT_SUPPORTED

    if wins.ndim != 2 or wins.size == 0:
        return Verdict("cost_real_layers", model, NOT_MEASURABLE, {}, COST_REAL, "no feasible pattern solved")
    return judge("cost_real_layers", model, {"wins": wins}, effects, decide, COST_REAL, over="windows",
                 min_units=MIN_COST_WINDOWS, seed=seed, fractions=tuple(COST_REAL),
                 evidence={"Ts": list(Ts), "measured_at": MEASURED_AT["cost_real_layers"], **(extra or {})})  # fmt: skip


REGIMES = {"bos_mass": 0.5}


def regimes_verdict(model: str, inits: dict[str, tuple[dict, dict]] | None, reason: str = "") -> Verdict:
    """Claim `bigram_backcopy_regimes` as the paper states it (a sink when BOS is available), from
    `{init: (with BOS, without BOS)}` cells `{"bos_mass", "diag_mass", "pattern", "agreement"}` (seed means).
    Supported: the with-BOS switch head sinks (BOS mass ≥ `bos_mass`) at every init; partly (init-dependent):
    at some; else not supported. The without-BOS cells are evidence only (the diagonal is our addition)."""
    if not inits:
        return Verdict("bigram_backcopy_regimes", model, NOT_MEASURABLE, {}, REGIMES, reason or "no runs")
    evidence = {f"{init}_{'bos' if flag else 'nobos'}": cell for init, pair in inits.items()
                for flag, cell in zip((True, False), pair)}  # fmt: skip

    def effects(_u, th):
        sinks = [with_bos["bos_mass"] >= th["bos_mass"] for with_bos, _ in inits.values()]
        return {"inits_with_sink": float(np.mean(sinks))}

    def decide(e, _th):
        share = e["inits_with_sink"]
        return SUPPORTED if share == 1 else PARTLY if share > 0 else NOT_SUPPORTED

    verdict = judge("bigram_backcopy_regimes", model, {}, effects, decide, REGIMES, fractions=("bos_mass",),
                    over="seed means per cell (agreement over seeds in the evidence)", evidence=evidence)  # fmt: skip
    if verdict.verdict == PARTLY:
        holding = [init for init, (with_bos, _) in inits.items() if with_bos["bos_mass"] >= REGIMES["bos_mass"]]
        note = f"init-dependent: a sink with BOS at {', '.join(holding)} only"
        return replace(verdict, reason="; ".join(p for p in (note, verdict.reason) if p))
    return verdict


# --- section 5 ---------------------------------------------------------------------------------------------

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


# --- section 6 ---------------------------------------------------------------------------------------------

GU = {"epsilon": 0.3, "present_rate": 0.2}


def gu_sink_rate_verdict(model: str, scores: dict[str, np.ndarray], seed: int = 0) -> Verdict:
    """Claim `gu_sink_rate` from per-window sink scores α^w (W, L, H) on `natural`, `random` and `repeat`
    tokens: the rate mean [α^w > ε] per corpus. Present when the rate ≥ `present_rate`; supported: present on
    all three; partly: on natural text; else not supported. Interval over windows (each corpus its own)."""
    needed = ("natural", "random", "repeat")
    if any(name not in scores or np.asarray(scores[name]).size == 0 for name in needed):
        return Verdict("gu_sink_rate", model, NOT_MEASURABLE, {}, GU, "a corpus was not analysed")

    def effects(u, th):
        rates = {f"sink_rate_{name}": float((np.asarray(u[name]) > th["epsilon"]).mean()) for name in needed}
        return {"min_rate": min(rates.values()), **rates}

    def decide(e, th):
        present = {name: e[f"sink_rate_{name}"] >= th["present_rate"] for name in needed}
        return SUPPORTED if all(present.values()) else PARTLY if present["natural"] else NOT_SUPPORTED

    return judge("gu_sink_rate", model, {name: np.asarray(scores[name], float) for name in needed}, effects, decide,
                 GU, over="windows", min_units=MIN_WINDOWS, seed=seed, fractions=("present_rate",))  # fmt: skip
