"""Section 3's claims, the attention switch: `switch` (per head: a switched-off query sinks; a sinking query of a
head whose BOS value drains is switched off), `value_drain` (sinking goes with a small v₀), `switch_routes` (the routes a switched-off query takes) and
`mlp_like` (descriptive). `GRID` and `TAU_CURVE` are the δ and τ scales the per-window tables are counted at.
Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the claims' words in
`reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

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

GRID = (0.5, 1.0, 2.0)  # the δ (and τ) scales per-window tables are counted at
ONE_DELTA = "only δ × 1 was counted (--quick: one evidence pass per corpus), so halving and doubling δ needs the passes"
# τ of the switch curves: dense where P(sink | off) and P(off | sink) cross on the embedded models (0.1 … 0.2)
TAU_CURVE = (0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.4, 0.6, 0.8, 1.0)


def grid_index(scale: float, grid: Sequence[float] = GRID) -> int:
    """The position of `scale` (a varied threshold over its section's value) in `grid`, the scales the tables were
    counted at. The sensitivity varies δ and τ × ½ and × 2, which `GRID` holds; any other scale raises ValueError."""
    return [math.isclose(scale, g) for g in grid].index(True)


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


SWITCH = {"miss_tol": 0.1, "partly_min": 0.5, "min_head_queries": 10.0}
SINK_HEAD_MIN = 0.5  # reported, never deciding: a sink head is hard-sink on at least half of its queries
DIRECTIONS = ("switch_implies_sink", "sink_implies_switch")


def head_switch_effects(counts: np.ndarray, drains: np.ndarray, drain_max: float, min_queries: float) -> dict:
    """Both directions of the switch theorem per head, from per-window counts (W, L, H, 3) of (off ∧ sink, off,
    sink) over queries t ≥ 1 at one τ, δ and per-window value drains (W, L, H).

    `switch_implies_sink`: the mean over heads with ≥ `min_queries` switched-off queries of P_h(sink | off) (each
    head one stratum, equally weighted); `sink_implies_switch`: the mean over heads with ≥ `min_queries` hard-sink
    queries in windows where the head's drain ‖v_0‖ / mean_{j≥1} ‖v_j‖ ≤ `drain_max` (the theorem's own
    condition) of P_h(off | sink) on those queries; `sink_implies_switch_undrained`: the same on the sink queries
    of windows where the value does not drain (the theorem predicts nothing there). NaN where no head qualifies."""
    total = counts.sum(0)  # (L, H, 3)
    drained = (drains <= drain_max)[..., None]
    in_drained = (counts * drained).sum(0)
    undrained = total - in_drained

    def mean_ratio(num: np.ndarray, den: np.ndarray) -> tuple[float, int]:
        use = den >= min_queries
        return (float(np.mean(num[use] / den[use])) if use.any() else math.nan), int(use.sum())

    a, n_a = mean_ratio(total[..., 0], total[..., 1])
    b, n_b = mean_ratio(in_drained[..., 0], in_drained[..., 2])
    c, n_c = mean_ratio(undrained[..., 0], undrained[..., 2])
    return {"switch_implies_sink": a, "n_heads_switching": float(n_a), "sink_implies_switch": b,
            "n_drained_sink_heads": float(n_b), "sink_implies_switch_undrained": c,
            "n_undrained_sink_heads": float(n_c),
            "pooled_p_sink_given_off": _ratio(float(total[..., 0].sum()), float(total[..., 1].sum())),
            "pooled_p_off_given_sink": _ratio(float(total[..., 0].sum()), float(total[..., 2].sum()))}  # fmt: skip


def sink_head_census(counts: np.ndarray, drains: np.ndarray, queries: int, drain_max: float, miss_tol: float) -> dict:
    """How many sink heads (hard sink on ≥ `SINK_HEAD_MIN` of their W · `queries` queries) are hard switches
    (P(off | sink) ≥ 1 − `miss_tol`) and how many drain (mean drain ≤ `drain_max`), from (W, L, H, 3) counts."""
    total = counts.sum(0)
    sink = total[..., 2] / (len(counts) * queries) >= SINK_HEAD_MIN
    with np.errstate(invalid="ignore", divide="ignore"):
        p_off = total[..., 0] / total[..., 2]
    hard = sink & (p_off >= 1 - miss_tol)
    names = [f"L{layer}.H{head}" for layer, head in zip(*np.nonzero(hard))]
    return {"n_heads": int(sink.size), "n_sink_heads": int(sink.sum()), "n_sink_heads_hard_switch": int(hard.sum()),
            "n_sink_heads_drained": int((sink & (drains.mean(0) <= drain_max)).sum()),
            "hard_switch_heads": ", ".join(names)}  # fmt: skip


def weaker(a: str | None, b: str | None) -> str | None:
    """The verdict of an 'if and only if' from its two directions: the weaker ranked one; a lone ranked direction
    (the other not measurable) at most `partly`; None where either record is not varied."""
    if a is None or b is None:
        return None
    order = (NOT_SUPPORTED, PARTLY, SUPPORTED)
    ranked = [v for v in (a, b) if v in order]
    if not ranked:
        return NOT_MEASURABLE
    word = min(ranked, key=order.index)
    return word if len(ranked) == 2 else min(word, PARTLY, key=order.index)


def switch_verdict(model: str, arrays: dict[str, np.ndarray], queries: int, drain_max: float, seed: int = 0
                   ) -> Verdict:  # fmt: skip
    """Claim `switch` per head, each direction of the theorem judged on its own over windows
    (`head_switch_effects`; τ, δ from the section, `drain_max` from the config; all varied × ½, × 2, τ and δ
    through the counted scales `GRID`): `switch_implies_sink` and `sink_implies_switch` (where the BOS value
    drains) are each graded ≥ 1 − `miss_tol` supported, ≥ `partly_min` partly. The claim's word is the weaker
    direction's (`weaker`: an 'if and only if' needs both), its interval that direction's; both directions'
    words, intervals and reasons are in the record, beside the census of sink heads (`sink_head_census`)."""
    if "head_counts" not in arrays:
        return Verdict("switch", model, NOT_MEASURABLE, {}, {}, "no per-head switch counts: the switch section is "
                       "from before the per-head test; recompute it")  # fmt: skip
    counts, drains = np.asarray(arrays["head_counts"], float), np.asarray(arrays["head_drain"], float)
    tau, delta = float(arrays["tau"]), float(arrays["delta"])
    thresholds = {"tau": tau, "delta": delta, "drain_max": drain_max, **SWITCH}
    units = {"counts": counts, "drains": drains}

    def at(u, th):
        return u["counts"][:, grid_index(th["delta"] / delta), grid_index(th["tau"] / tau)]

    def effects_for(direction: str):
        def effects(u, th):
            e = head_switch_effects(at(u, th), u["drains"], th["drain_max"], th["min_head_queries"])
            return {direction: e.pop(direction), **e}

        return effects

    def decide_for(direction: str):
        return lambda e, th: graded(e[direction], 1 - th["miss_tol"], th["partly_min"])

    judged = {d: judge(f"switch ({d})", model, units, effects_for(d), decide_for(d), thresholds, over="windows",
                       min_units=MIN_WINDOWS, seed=seed, fractions=("miss_tol", "partly_min"))
              for d in DIRECTIONS}  # fmt: skip
    a, b = judged["switch_implies_sink"], judged["sink_implies_switch"]
    word = weaker(a.verdict, b.verdict)
    order = (NOT_SUPPORTED, PARTLY, SUPPORTED)
    lead = min((v for v in (a, b) if v.verdict in order), key=lambda v: order.index(v.verdict), default=a)
    sensitivity = ([r | {"verdict": weaker(r["verdict"], s["verdict"])} for r, s in zip(a.sensitivity, b.sensitivity)]
                   if a.sensitivity and b.sensitivity else a.sensitivity or b.sensitivity)  # fmt: skip
    census = sink_head_census(counts[:, GRID.index(1.0), GRID.index(1.0)], drains, queries, drain_max,
                              SWITCH["miss_tol"])  # fmt: skip
    record = {**{k: v for k, v in (a.evidence | b.evidence).items() if k not in DIRECTIONS}, **census,
              **{d: {"verdict": v.verdict, "reason": v.reason, "interval": v.interval, "estimate": v.evidence.get(d)}
                 for d, v in judged.items()}}  # fmt: skip
    said = {"switch_implies_sink": "switch ⇒ sink", "sink_implies_switch": "sink ⇒ switch where the BOS value drains"}
    parts = [f"{said[d]}: {v.verdict}" + (f" ({v.reason})" if v.reason else "") for d, v in judged.items()]
    parts.append(f"{census['n_sink_heads_hard_switch']} of {census['n_sink_heads']} sink heads are hard switches")
    return Verdict("switch", model, word, record, thresholds, "; ".join(parts), interval=lead.interval,
                   sensitivity=sensitivity)


def switch_heads_table(arrays: dict[str, np.ndarray], queries: int, drain_max: float) -> pd.DataFrame:
    """One row per head at the section's τ and δ, pooled over windows: its queries t ≥ 1, hard-sink, switched-off
    and both counts, P(sink | off), P(off | sink), the mean value drain and the share of windows where it drains
    (≤ `drain_max`), whether it is a sink head (`SINK_HEAD_MIN`) and a hard switch (P(off | sink) ≥ 1 − miss_tol)."""
    if "head_counts" not in arrays:
        return pd.DataFrame()
    counts = np.asarray(arrays["head_counts"], float)[:, GRID.index(1.0), GRID.index(1.0)]  # (W, L, H, 3)
    drains = np.asarray(arrays["head_drain"], float)
    W, L, H, _ = counts.shape
    both, off, sink = (counts.sum(0)[..., i].ravel() for i in range(3))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_sink, p_off = both / off, both / sink
    is_sink = sink / (W * queries) >= SINK_HEAD_MIN
    return pd.DataFrame({"layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
                         "n_queries": W * queries, "n_sink": sink.astype(int), "n_off": off.astype(int),
                         "n_off_sink": both.astype(int), "p_sink_given_off": p_sink, "p_off_given_sink": p_off,
                         "value_drain_mean": drains.mean(0).ravel(),
                         "drained_window_share": (drains <= drain_max).mean(0).ravel(), "sink_head": is_sink,
                         "hard_switch": is_sink & (p_off >= 1 - SWITCH["miss_tol"])})  # fmt: skip


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
        counts = u["hard"][:, grid_index(th["delta"] / delta, deltas)]
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
        table = u["counts"][:, grid_index(th["delta"] / delta), grid_index(th["tau"] / tau)].sum(0)
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
