"""Section 3's claims, the attention switch: `switch` (a switched-off query sinks, a sinking query is switched
off), `value_drain` (sinking goes with a small v₀), `switch_routes` (the routes a switched-off query takes) and
`mlp_like` (descriptive). `GRID` and `TAU_CURVE` are the δ and τ scales the per-window tables are counted at.
Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the claims' words in
`reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sinkscope.reproduction.minima import MIN_WINDOWS
from sinkscope.reproduction.strata import rowwise_spearman, spearman
from sinkscope.reproduction.verdicts import (
    DESCRIPTIVE,
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    Verdict,
    graded,
    judge,
)

SWITCH = {"delta": 0.1, "miss_tol": 0.1, "partly_min": 0.5}
GRID = (0.5, 1.0, 2.0)  # the δ (and τ) scales per-window tables are counted at
ONE_DELTA = "only δ × 1 was counted (--quick: one evidence pass per corpus), so halving and doubling δ needs the passes"
# τ of the switch curves: dense where P(sink | off) and P(off | sink) cross on the embedded models (0.1 … 0.2)
TAU_CURVE = (0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.4, 0.6, 0.8, 1.0)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


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
    fixed = {} if deltas == GRID else {"delta": ONE_DELTA}

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
                 min_units=MIN_WINDOWS, seed=seed, fractions=("miss_tol", "partly_min"), fixed=fixed,
                 evidence={"taus": list(taus)})  # fmt: skip


VALUE_DRAIN = {"rho_min": 0.3, "drain_max": 0.5, "sink_head_hard_frac": 0.5, "min_groups_per_layer": 3}


def value_drain_verdict(model: str, drains: np.ndarray, hard_sink: np.ndarray, queries: int, seed: int = 0,
                        delta: float = 0.1) -> Verdict:  # fmt: skip
    """Claim `value_drain` from per-window drains (W, L, KV) and hard-sink counts (W, L, H) at δ, or (W, S, L, H)
    at δ × `GRID` (S = 3), out of `queries` per window. Per KV group: the largest hard-sink fraction of its query
    heads and the mean drain. Effect: Spearman ρ of the two over all groups (negative: sinking goes with a small
    v_0). Supported: ρ ≤ −`rho_min`, the within-layer ρ not positive (where layers have ≥ `min_groups_per_layer`
    groups; none has: not required), and the groups with a head hard-sink on ≥ `sink_head_hard_frac` of queries
    have median drain ≤ `drain_max`; partly: ρ < 0; else not supported. δ, the gate on groups per layer and every
    cut enter the sensitivity."""
    drains, hard = np.asarray(drains, float), np.asarray(hard_sink, float)
    hard = hard[:, None] if hard.ndim == 3 else hard
    W, L, KV = drains.shape
    group = hard.shape[-1] // KV
    deltas = GRID if hard.shape[1] == len(GRID) else (1.0,)

    def effects(u, th):
        index = [i for i, d in enumerate(deltas) if math.isclose(th["delta"] / delta, d)]
        if not index:
            return {"rho_all_groups": math.nan}
        counts = u["hard"][:, index[0]]
        frac = (counts.sum(0) / (len(counts) * queries)).reshape(L, KV, group).max(-1).ravel()
        drain = u["drains"].mean(0).ravel()
        if np.ptp(frac) == 0 or np.ptp(drain) == 0:
            return {"rho_all_groups": math.nan}
        within, used = rowwise_spearman(frac.reshape(L, KV), drain.reshape(L, KV), th["min_groups_per_layer"])
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

    thresholds = VALUE_DRAIN | {"delta": delta}
    return judge("value_drain", model, {"drains": drains, "hard": hard}, effects, decide, thresholds,
                 over="windows", min_units=MIN_WINDOWS, seed=seed, fractions=("sink_head_hard_frac",),
                 fixed={} if deltas == GRID else {"delta": ONE_DELTA},
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
