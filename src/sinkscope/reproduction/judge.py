"""From the sections' tables to the numbers each verdict function takes (`reproduction.*_claims`), and the evidence
tables the report shows and links each verdict to. No model, no I/O: tables in, verdicts and tables out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from sinkscope.functional.switch_routes import ROUTES
from sinkscope.reproduction.ablation_claims import dormant_curve, dormant_heads_verdict, sink_ablation_verdict
from sinkscope.reproduction.ablation_variants import variant_arrays
from sinkscope.reproduction.config import DELTA_SCALES, SINK_QUERY_DELTA, ReproduceConfig
from sinkscope.reproduction.cost_claims import cost_closed_forms_verdict, cost_real_verdict
from sinkscope.reproduction.experiment_claims import judge_experiments
from sinkscope.reproduction.geometry_claims import geometry_verdict, representability_verdict
from sinkscope.reproduction.matched_heads import LAYER_MATCHED
from sinkscope.reproduction.regime_claims import regimes_verdict
from sinkscope.reproduction.sink_rate_claims import gu_sink_rate_verdict
from sinkscope.reproduction.smoothing_claims import oversmoothing_verdict
from sinkscope.reproduction.switch_claims import (
    GRID,
    TAU_CURVE,
    mlp_like_verdict,
    switch_curves,
    switch_heads_table,
    switch_routes_verdict,
    switch_verdict,
    value_drain_verdict,
)
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, Verdict
from sinkscope.reproduction.weight_claims import weights_verdict

GEOMETRY_COLUMNS = ["layer", "bos_cos_mean_z", "bos_cos_max_z", "bos_cos_nonpos_frac_z", "bos_cos_mean_h",
                    "bos_cos_max_h", "bos_cos_nonpos_frac_h", "bos_norm_ratio_h", "gamma1", "gamma2", "sink_margin",
                    "h1", "h2", "context_rank", "sink_span_distance", "mlp_like_frac"]  # fmt: skip
HEAD_COLUMNS = ["layer", "head", "head_class", "sink_score", "hard_sink_frac", "hard_diag_frac", "ahon_ln",
                "value_drain", "switch_off_frac", "switch_agreement", "smooth_b", "smooth_c", "smooth_dense_more",
                "smooth_dense_more_measured", "smooth_dcos_pred", "smooth_dcos_pred_measured", "smooth_dcos_obs",
                "smooth_sign_agree"]  # fmt: skip
WEIGHT_COLUMNS = ["layer", "head", "qk_sigma1", "qk_nuclear_over_frobenius", "qk_effective_rank", "qk_bos_alignment",
                  "qk_bos_gain", "vo_sigma1", "vo_nuclear_over_frobenius", "vo_effective_rank", "vo_bos_alignment",
                  "vo_bos_gain"]  # fmt: skip


@dataclass(frozen=True)
class Measurements:
    """Everything one model's verdicts are computed from: the analyze runs per corpus, the ablation curve, the
    layer costs, the weight table, the per-window evidence per corpus, the certificates, the p̂/q̂ table, the
    per-window sink-query ablation, the per-window switch evidence per main corpus, issue 36's experiments and
    the ablations re-measured at their own thresholds × ½, × 2 (empty under `--quick`)."""

    runs: dict
    ablation: pd.DataFrame
    costs: pd.DataFrame
    weights: pd.DataFrame
    evidence: dict[str, dict[str, np.ndarray]]
    certificates: pd.DataFrame
    alignment: pd.DataFrame
    sink_queries: dict[str, np.ndarray]
    switch: dict[str, dict[str, np.ndarray]]
    experiments: dict = field(default_factory=dict)  # issue 36's sections by name (`experiment_sections`)
    ablation_variants: dict[str, np.ndarray] = field(default_factory=dict)  # `reproduction.ablation_variants`


def at_delta(array: np.ndarray) -> np.ndarray:
    """The δ × 1 slice of a per-window array with a δ-scale axis after W (`DELTA_SCALES`, or δ alone)."""
    return array[:, DELTA_SCALES.index(1.0) if array.shape[1] == len(DELTA_SCALES) else 0]


def _columns(frame: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    return frame[[name for name in names if name in frame.columns]]


def corpus_verdicts(model: str, corpus: str, run, arrays: dict[str, np.ndarray], switch: dict[str, np.ndarray],
                    T: int, seed: int, drain_max: float = 0.1) -> list[Verdict]:  # fmt: skip
    """Sections 1–3 on one analysed corpus of windows of T tokens: geometry (z and h), oversmoothing, switch
    curves, switch routes, value drain and MLP-like layers from the per-window evidence and the run's smoothing
    columns."""
    heads = run.heads
    counts = {"z": arrays["nonpos"], "z_control": arrays["nonpos_control"]}
    if "nonpos_h" in switch:
        counts |= {"h": switch["nonpos_h"], "h_control": switch["nonpos_h_control"]}
    out = [geometry_verdict(model, counts, T - 1, seed)]
    if "smooth_dcos_obs" in heads and "smooth_dense_more_measured" in heads:
        smooth = heads.dropna(subset=["smooth_dcos_obs"])
        out.append(oversmoothing_verdict(model, smooth["smooth_dcos_obs"], smooth["smooth_dense_more_measured"]
                                         .astype(bool), smooth["layer"], seed))  # fmt: skip
    else:
        out.append(Verdict("oversmoothing", model, NOT_MEASURABLE, reason="no smoothing columns"))
    tau, delta = run.meta["config"]["tau"], run.meta["config"]["delta"]
    out.append(switch_verdict(model, switch, T - 1, drain_max, seed))
    names = [route.name for route in ROUTES]
    extra = {}
    if "route_bos_mass" in switch:  # the mean BOS mass of each route's queries at δ, τ
        counts, mass = switch["routes"][:, 1, 1].sum(0), switch["route_bos_mass"].sum(0)
        extra["mean_bos_mass"] = {name: float(m / n) if n else None for name, m, n in zip([*names, "unexplained"],
                                                                                          mass, counts)}  # fmt: skip
    out.append(switch_routes_verdict(model, switch["routes"], names, [route.sink for route in ROUTES], tau, delta,
                                     extra, seed))  # fmt: skip
    out.append(value_drain_verdict(model, arrays["drain"], arrays["hard_sink"], T - 1, seed, delta))
    out.append(mlp_like_verdict(model, at_delta(arrays["mlp_like"]), T - 1, seed))
    return [replace(verdict, corpus=corpus) for verdict in out]


def sink_query_verdict(model: str, corpus: str, arrays: dict[str, np.ndarray], ablation: pd.DataFrame, seed: int,
                       fraction: float = 0.1, variants: dict[str, np.ndarray] | None = None) -> Verdict:  # fmt: skip
    """`sink_ablation`: the sink-like heads (`fraction` of all heads) zeroed on their sink queries vs the same heads
    on non-sink queries and matched random head-and-query sets, per window (`reproduction.sink_query`), with the
    same at fraction and δ × ½, × 2 from `variants` (`reproduction.ablation_variants`); zeroing them on every query
    (mode zero) is evidence beside it."""
    if not arrays:
        return Verdict("sink_ablation", model, NOT_MEASURABLE, reason="no sink-query ablation", corpus=corpus)
    extra = {"n_heads": int(arrays["n_heads"]), "n_windows": int(arrays["selected"].size),
             "cells_selected": float(arrays["cells_selected"].sum()),
             "cells_same_heads_mean": float(arrays["cells_same_heads"].sum()),
             "base_loss": float(arrays["base"].mean())}  # fmt: skip
    every = ablation[(ablation["mode"] == "zero") & (ablation["selection"] == "highest-hard-sink")]
    if len(every):
        extra["delta_zero_every_query"] = float(every.iloc[0]["delta_loss"])
    verdict = sink_ablation_verdict(model, arrays["selected"], arrays["same_heads"], arrays["random"], extra, seed,
                                    fraction, SINK_QUERY_DELTA, variant_arrays(variants or {}, "sink_ablation"))
    return replace(verdict, corpus=corpus)


def ablation_verdicts(model: str, corpus: str, ablation: pd.DataFrame, heads: pd.DataFrame, seed: int,
                      fraction: float = 0.1, variants: dict[str, np.ndarray] | None = None) -> list[Verdict]:  # fmt: skip
    """The dormant heads (`fraction` of all heads) zeroed against layer-matched and unmatched random sets of the
    same size, per window (`sinkscope.pipelines.ablate`, `reproduction.matched_heads`), with the same at fraction
    × ½, × 2 from `variants` (`reproduction.ablation_variants`)."""
    frame = ablation[ablation["mode"] == "zero"]
    chosen = frame[frame["selection"] == "lowest-ahon-ln"]
    if chosen.empty or "window_delta" not in frame:
        return [Verdict("dormant_heads", model, NOT_MEASURABLE, reason="no per-window lowest-ahon-ln ablation",
                        corpus=corpus)]  # fmt: skip
    row = chosen.iloc[0]
    same_size = frame[frame["n_heads"] == row["n_heads"]]

    def draws(selection: str) -> np.ndarray:  # (windows, draws)
        rows = same_size[same_size["selection"] == selection]["window_delta"]
        return np.stack([np.asarray(x, float) for x in rows], 1) if len(rows) else np.zeros((len(row["window_delta"]), 0))

    extra = {"mode": "zero", "n_heads": int(row["n_heads"]), "heads": row["heads"], "base_loss": float(row["base_loss"]),
             "delta_selected_sem": float(row["delta_sem"]), "n_windows": int(row["n_windows"]),
             "dormant_frac_by_ahon_ln": dormant_curve(heads["ahon_ln"])}  # fmt: skip
    matched, random = draws(LAYER_MATCHED), draws("random")
    if matched.shape != random.shape:  # a table from before the layer-matched control
        return [Verdict("dormant_heads", model, NOT_MEASURABLE, extra, reason=f"the ablation table holds "
                        f"{matched.shape[1]} layer-matched and {random.shape[1]} random draws: recompute its section",
                        corpus=corpus)]  # fmt: skip
    verdict = dormant_heads_verdict(model, np.asarray(row["window_delta"], float), matched, random, extra, seed,
                                    fraction, variant_arrays(variants or {}, "dormant_heads"))  # fmt: skip
    return [replace(verdict, corpus=corpus)]


def forced_bos(ablation: pd.DataFrame) -> dict:
    """The forced-BOS ablation as a described measurement: Δloss of the sink-like heads with their attention
    moved to BOS, and of random head sets of the same size (mean and draws)."""
    frame = ablation[ablation["mode"] == "bos"]
    chosen = frame[frame["selection"] == "highest-hard-sink"]
    if chosen.empty:
        return {}
    row = chosen.iloc[0]
    random = frame[(frame["selection"] == "random") & (frame["n_heads"] == row["n_heads"])]["delta_loss"]
    return {"forced_bos_delta_selected": float(row["delta_loss"]), "forced_bos_delta_random_mean": float(random.mean())
            if len(random) else None, "forced_bos_random_draws": int(len(random))}  # fmt: skip


def cost_layers_verdict(model: str, corpus: str, costs: pd.DataFrame, seed: int, depth: int | None = None) -> Verdict:
    """Per window and T, the share of layers where the sink is cheaper (feasible and cheaper, or the diagonal
    infeasible); pairs where neither pattern was solved are left out. `depth`: the model's layers (the solved
    ones are those of `costs`)."""
    if costs.empty or "T" not in costs:
        return Verdict("cost_real_layers", model, NOT_MEASURABLE, reason="no layer costs", corpus=corpus)
    wide = costs.pivot_table(index=["T", "window", "layer"], columns="pattern", values="cost", aggfunc="first")
    sink, diag = wide["sink"].to_numpy(float), wide["diagonal"].to_numpy(float)
    valid = ~(np.isnan(sink) | np.isnan(diag)) & (np.isfinite(sink) | np.isfinite(diag))
    wins = pd.Series(np.isfinite(sink) & (~np.isfinite(diag) | (sink < diag)), index=wide.index)[valid]
    share = wins.groupby(level=["window", "T"]).mean().unstack("T")  # (W, len(Ts))
    both = np.isfinite(sink) & np.isfinite(diag)
    extra = {"pairs": int(valid.sum()), "sink_infeasible": int((~np.isfinite(sink)).sum()),
             "diagonal_infeasible": int((~np.isfinite(diag)).sum()),
             "median_diag_over_sink": float(np.median(diag[both] / sink[both])) if both.any() else None}  # fmt: skip
    layers = sorted(int(x) for x in costs["layer"].unique())
    verdict = cost_real_verdict(model, share.to_numpy(float), [int(T) for T in share.columns], extra, seed, layers,
                                depth)  # fmt: skip
    return replace(verdict, corpus=corpus)


def weight_heads(weights: pd.DataFrame, heads: pd.DataFrame, alignment: pd.DataFrame) -> pd.DataFrame:
    """The weight statistics joined with each head's class and sink scores (first corpus) and its p̂/q̂ score."""
    info = _columns(heads, ["layer", "head", "head_class", "sink_score", "hard_sink_frac"])
    frame = _columns(weights, WEIGHT_COLUMNS).merge(info, on=["layer", "head"], how="left")
    frame = frame.merge(alignment, on=["layer", "head"], how="left")
    return frame.assign(is_sink=frame["head_class"] == "sink")


def weight_verdicts(model: str, corpus: str, table: pd.DataFrame, seed: int, head_dim: int) -> list[Verdict]:
    """Sink heads (head class `sink`: mean sink score α > ε = 0.3) vs the other heads of the same layer: W_QK
    effective rank (all layers; its level against the head dimension `head_dim`), and the signed p̂/q̂ score over RoPE offsets (middle layers, where the
    certificates give p̂ and q̂)."""
    aligned = table.dropna(subset=["qk_pq_score"]) if "qk_pq_score" in table else table.iloc[:0]
    n_layers = int(table["layer"].max()) + 1 if len(table) else 0
    return [
        replace(weights_verdict("weights_low_rank", model, table["qk_effective_rank"], table["sink_score"],
                                table["layer"], seed, head_dim=head_dim), corpus=corpus),
        replace(weights_verdict("weights_bos_alignment", model, aligned["qk_pq_score"], aligned["sink_score"],
                                aligned["layer"], seed, n_layers), corpus=corpus),
    ]  # fmt: skip


ANCHORS = {"builtin:prose": "natural", "builtin:random": "random", "builtin:repeat": "repeat"}


def judge_model(model: str, config: ReproduceConfig, m: Measurements, claims: tuple[str, ...] | None = None
                ) -> tuple[list[Verdict], dict[str, pd.DataFrame]]:  # fmt: skip
    """Every per-model verdict, and the evidence tables each links to: geometry (per corpus, layer), switch (per
    corpus, τ and δ scale), value_drain (per corpus, KV group), certificates, heads (first corpus), weights,
    ablation, cost_layers, anchors. `claims`: judge only those (their sections alone were read:
    `plan.ModelPlan.needed`), and return no tables."""
    first, seed, T = config.corpora[0], config.seed, config.seq_len

    def wanted(*names: str) -> bool:
        return claims is None or any(name in claims for name in names)

    verdicts = []
    if wanted("geometry", "oversmoothing", "switch", "switch_routes", "value_drain", "mlp_like"):
        for corpus in config.corpora:
            verdicts += corpus_verdicts(model, corpus, m.runs[corpus], m.evidence[corpus], m.switch[corpus], T, seed,
                                        config.switch_drain_max)  # fmt: skip
    bos = forced_bos(m.ablation) if "mode" in m.ablation else {}
    verdicts = [replace(v, evidence=v.evidence | bos) if v.claim == "switch_routes" else v for v in verdicts]
    heads = m.runs[first].heads
    depth = int(heads["layer"].max()) + 1
    if wanted("representability"):
        width = int(m.certificates["width"].iloc[0]) if len(m.certificates) else 0
        verdicts.append(replace(representability_verdict(model, m.certificates.to_dict("records"), width, seed, depth),
                                corpus=first))  # fmt: skip
    fraction = config.ablation_fraction
    if wanted("sink_ablation"):
        verdicts.append(sink_query_verdict(model, first, m.sink_queries, m.ablation, seed, fraction,
                                           m.ablation_variants))  # fmt: skip
    if wanted("dormant_heads"):
        verdicts += ablation_verdicts(model, first, m.ablation, heads, seed, fraction, m.ablation_variants)
    if wanted("cost_real_layers"):
        verdicts.append(cost_layers_verdict(model, first, m.costs, seed, depth))
    if wanted("weights_low_rank", "weights_bos_alignment"):
        weight_table = weight_heads(m.weights, heads, m.alignment)
        verdicts += weight_verdicts(model, first, weight_table, seed, int(m.runs[first].meta["model"]["head_dim"]))
    if wanted("gu_sink_rate"):
        scores = {label: m.evidence[c]["sink_column"] / T for c, label in ANCHORS.items() if c in m.evidence}
        verdicts.append(replace(gu_sink_rate_verdict(model, scores, seed), corpus="builtin:prose,random,repeat"))
    if claims is not None:
        more = judge_experiments(model, config, m.experiments)[0] if m.experiments else []
        return [verdict for verdict in verdicts + more if verdict.claim in claims], {}
    tables = {
        "geometry": pd.concat([geometry_table(m.runs[corpus], m.evidence[corpus] | m.switch[corpus], T)
                               .assign(corpus=corpus)
                               for corpus in config.corpora], ignore_index=True),  # fmt: skip
        "switch_heads": pd.concat([switch_heads_table(m.switch[corpus], T - 1, config.switch_drain_max)
                                   .assign(corpus=corpus) for corpus in config.corpora], ignore_index=True),
        "switch": pd.concat([switch_table(m.switch[corpus]).assign(corpus=corpus) for corpus in config.corpora],
                            ignore_index=True),  # fmt: skip
        "switch_routes": pd.concat([routes_table(m.switch[corpus]).assign(corpus=corpus)
                                    for corpus in config.corpora], ignore_index=True),  # fmt: skip
        "value_drain": pd.concat([drain_table(m.evidence[corpus], T).assign(corpus=corpus) for corpus in config.corpora],
                                 ignore_index=True),  # fmt: skip
        "certificates": m.certificates,
        "heads": _columns(heads, HEAD_COLUMNS),
        "weights": weight_table,
        "ablation": pd.concat([window_text(m.ablation), sink_query_table(m.sink_queries)], ignore_index=True),
        "cost_layers": m.costs,
        "anchors": pd.DataFrame(
            [{"corpus": corpus, "sink_rate": m.runs[corpus].meta["summary"]["sink_rate"],
              "sink_rate_of_mean": m.runs[corpus].meta["summary"].get("sink_rate_of_mean"),
              "mean_sink_score": m.runs[corpus].meta["summary"]["mean_sink_score"],
              "windows": m.runs[corpus].meta["corpus"].get("windows")} for corpus in m.runs]),  # fmt: skip
    }
    if m.experiments:
        more, more_tables = judge_experiments(model, config, m.experiments)
        verdicts, tables = verdicts + more, tables | more_tables
    return verdicts, tables


def geometry_table(run, arrays: dict[str, np.ndarray], T: int) -> pd.DataFrame:
    """The run's per-layer geometry columns with the per-window evidence's BOS and control non-positive
    fractions on z and, when the switch pass ran, on h (the numbers `geometry` and `mlp_like` are computed from)."""
    W = arrays["nonpos"].shape[0]
    frame = _columns(run.layers, GEOMETRY_COLUMNS).copy()
    frame["nonpos_frac_bos"] = arrays["nonpos"].sum(0) / (W * (T - 1))
    frame["nonpos_frac_control"] = arrays["nonpos_control"].sum(0) / (W * (T - 2))
    if "nonpos_h" in arrays:
        frame["nonpos_frac_bos_h"] = arrays["nonpos_h"].sum(0) / (W * (T - 1))
        frame["nonpos_frac_control_h"] = arrays["nonpos_h_control"].sum(0) / (W * (T - 2))
    frame["mlp_like_frac_windows"] = at_delta(arrays["mlp_like"]).sum(0) / (W * (T - 1))
    return frame


def switch_table(arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    """The pooled switch 2×2 and its conditionals at every δ scale and τ of the curves."""
    rows = []
    for i, d_scale in enumerate(GRID):
        for k, tau in enumerate(TAU_CURVE):
            cells = arrays["curve"][:, i, k].sum(0)
            curves = switch_curves(cells[None])
            rows.append({"delta_scale": d_scale, "tau": tau,
                         **{f"n_{k}": int(v) for k, v in zip(("off_sink", "off_nosink", "on_sink", "on_nosink"), cells)},
                         **{name: float(curve[0]) for name, curve in curves.items()}})  # fmt: skip
    return pd.DataFrame(rows)


def routes_table(arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    """Switched-off queries per route and layer at δ and τ (`stats.switch_routes`), pooled over windows."""
    counts = arrays["routes_by_layer"].sum(0)  # (L, R + 1)
    names = [route.name for route in ROUTES] + ["unexplained"]
    frame = pd.DataFrame(counts, columns=names).astype(int)
    return frame.assign(layer=np.arange(len(frame)), n_switched_off=frame[names].sum(axis=1))


def window_text(ablation: pd.DataFrame) -> pd.DataFrame:
    """The ablation table with each row's per-window Δloss as one space-separated cell (for the CSV)."""
    if "window_delta" not in ablation:
        return ablation
    cells = [" ".join(f"{x:.6g}" for x in np.asarray(v, float)) if isinstance(v, (list, np.ndarray)) else ""
             for v in ablation["window_delta"]]  # fmt: skip
    return ablation.assign(window_delta=cells)


def sink_query_table(arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per set of the sink-query ablation: mean Δloss over windows (and draws), its draws' spread."""
    if not arrays:
        return pd.DataFrame()
    rows = [{"mode": "zero on sink queries", "selection": "sink queries", "delta_loss": float(arrays["selected"].mean()),
             "n_windows": int(arrays["selected"].size), "draws": 1}]  # fmt: skip
    for name, label in (("same_heads", "same heads, non-sink queries"), ("random", "random heads and queries")):
        per_draw = arrays[name].mean(0)
        rows.append({"mode": "zero on sink queries", "selection": label, "delta_loss": float(per_draw.mean()),
                     "delta_draw_min": float(per_draw.min()), "delta_draw_max": float(per_draw.max()),
                     "n_windows": int(arrays[name].shape[0]), "draws": int(arrays[name].shape[1])})  # fmt: skip
    return pd.DataFrame(rows)


def drain_table(arrays: dict[str, np.ndarray], T: int) -> pd.DataFrame:
    """Per KV group: mean value drain over windows and the largest hard-sink fraction of its query heads."""
    drain = arrays["drain"].mean(0)  # (L, KV)
    hard = at_delta(arrays["hard_sink"])
    head_frac = hard.sum(0) / (hard.shape[0] * (T - 1))  # (L, H)
    group = head_frac.shape[1] // drain.shape[1]
    group_frac = head_frac.reshape(head_frac.shape[0], -1, group).max(-1)
    L, KV = drain.shape
    return pd.DataFrame({"layer": np.repeat(np.arange(L), KV), "kv_head": np.tile(np.arange(KV), L),
                         "value_drain": drain.ravel(), "max_hard_sink_frac": group_frac.ravel()})  # fmt: skip


def fit_exponent(T: np.ndarray, cost: np.ndarray) -> float:
    """Slope of log cost on log T (least squares)."""
    return float(np.polyfit(np.log(T), np.log(cost), 1)[0])


def judge_theory(theory: pd.DataFrame | None, regimes: dict) -> list[Verdict]:
    """Model-free claims: closed-form exponents (nuclear cost, T ≥ 64) with the exact programs' agreement, and
    the bigram-backcopy regimes (`theory` None: the regimes alone, a run of some claims only)."""
    regime = regimes_verdict("synthetic", regimes.get("inits"), regimes.get("reason", ""))
    if theory is None:
        return [regime]
    nuclear = theory[(theory["norm"] == "nuclear") & (theory["T"] >= 64)]
    exponents = {
        pattern: fit_exponent(group["T"].to_numpy(float), group["closed_form"].to_numpy(float))
        for pattern, group in nuclear.groupby("pattern")
    }
    solved = theory[np.isfinite(theory["exact"])]
    error = float(((solved["exact"] - solved["closed_form"]).abs() / solved["closed_form"]).max()) if len(solved) else (
        math.nan
    )
    closed = cost_closed_forms_verdict("theory", exponents.get("sink", math.nan),
                                       exponents.get("diagonal", math.nan), error)  # fmt: skip
    return [closed, regime]
