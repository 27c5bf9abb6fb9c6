"""The claims of issue 36's experiments (`reproduction.experiment_sections`), judged by the steps of
`reproduction.verdicts` (units, decision on effect sizes, bootstrap over the right unit, every threshold varied):

- `sink_in_use` (windows): the loss a recent-window KV cache costs, and how much of it keeping BOS restores,
  against keeping one random early context token instead;
- `dense_causal` (windows): the share of heads, and of whole layers, whose uniform attention (λ = 1) inside the
  real forward pass raises the mean pairwise cosine of the residual leaving the layer;
- `prevalence` (windows): the share of sink heads against the share of diagonal heads, each head classified in
  each window;
- `switch_assumptions` (windows): the theorem's assumption in each head's value space, where it can fail
  (`reproduction.switch_assumption_claims`);
- `cost_boundary` (random embedding draws, within their (T, rank) cell): the share of draws where the closed-form
  boundary (Wendel's P(H1) < ½ → diagonal, r ≥ T + 1 → sink) names the exact winner, beside the vocabulary-level
  closed forms against the exact programs;
- `cost_boundary_trained` (lab runs, seeds within their setting): where that boundary predicts the diagonal, the
  share of trained bigram-backcopy models whose switch head is a diagonal, with the sink side as the control.

`judge_experiments` turns the sections' read-back data into verdicts and the tables the report links.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.kv_plan_claims import KV_PLAN, kv_plan_table, kv_plan_verdict
from sinkscope.reproduction.minima import MIN_DRAWS, MIN_HEADS, MIN_RUNS, MIN_WINDOWS
from sinkscope.reproduction.switch_assumption_claims import (
    ASSUMPTIONS,
    assumptions_table,
    assumptions_verdict,
)
from sinkscope.reproduction.verdicts import (
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    Verdict,
    graded,
    judge,
    too_few,
)

SINK_IN_USE = {"recovered_min": 0.5, "control_max": 0.5, "partly_min": 0.2}
DENSE_CAUSAL = {"counteract_tol": 0.2, "partly_frac": 0.5, "rise_min": 1e-4}
PREVALENCE = {"ratio_min": 2.0, "sink_min": 0.2, "epsilon": 0.3}
COST_BOUNDARY = {"miss_tol": 0.1, "partly_min": 0.5}
BOUNDARY_TRAINED = {"miss_tol": 0.1, "partly_min": 0.5, "control_min": 0.5}
# What each claim's measurement fixed (recorded in its sensitivity as not varied, with the reason).
SINK_IN_USE_FIXED = {"T": "the windows' length T = 2 × seq_len is fixed by the eviction section (another T is another "
                          "pass)",
                     "recent_window": "the KV cache keeps the recent w keys, w fixed by the eviction section (another "
                                      "w is another pass)"}  # fmt: skip
DENSE_FIXED = {"lambda": "λ = 1 (uniform causal attention) is the claim's own dense end; the section measured λ = 0 "
                         "and 1 only"}  # fmt: skip
PREVALENCE_FIXED = {"class_cuts": "one cut ε for both classes (a head is sink, diagonal, both or neither; no "
                                  "precedence), varied above; the previous-token, dense and mixed cuts of the head "
                                  "classes do not enter the effect"}  # fmt: skip
BOUNDARY_FIXED = {"grid": "T = 4, 8, 12; d = 16; rank 2 … 16; 8 draws per cell: the grid of the cost-regimes section "
                          "(another grid is another set of exact programs)"}  # fmt: skip
TRAINED_FIXED = {"settings": "the lab's 4 settings (V, T, d), 3 seeds each and its steps are fixed by the boundary "
                             "lab section (another setting is another training run)"}  # fmt: skip
THRESHOLDS = {"sink_in_use": SINK_IN_USE, "dense_causal": DENSE_CAUSAL, "prevalence": PREVALENCE,
              "switch_assumptions": ASSUMPTIONS, "cost_boundary": COST_BOUNDARY,
              "cost_boundary_trained": BOUNDARY_TRAINED, "kv_plan_measures": KV_PLAN}  # by claim (docs/reproduction.md)


def sink_in_use_verdict(model: str, losses: dict[str, np.ndarray], extra: dict | None = None, seed: int = 0
                        ) -> Verdict:  # fmt: skip
    """Per window: eviction cost `recent − full`; the sink's effect `recent − sink` (`delta_sink_kept`,
    nats/token); its share of the cost (`recovered_share`, primary: the effect the rules read) and the control
    token's (`control_recovered_share`), ratios of means.
    Supported: the sink recovers ≥ `recovered_min` of the cost and the control ≤ `control_max` × the sink's;
    partly: the sink recovers ≥ `partly_min`; not measurable where eviction costs nothing."""
    units = {name: np.asarray(losses[name], float) for name in ("full", "recent", "sink", "control")}

    def effects(u, th):
        cost = float((u["recent"] - u["full"]).mean())
        kept = float((u["recent"] - u["sink"]).mean())
        control = float((u["recent"] - u["control"]).mean())
        if not cost > 0:
            return {"recovered_share": math.nan, "delta_sink_kept": kept, "eviction_cost": cost}
        return {"recovered_share": kept / cost, "delta_sink_kept": kept, "control_recovered_share": control / cost,
                "eviction_cost": cost, "delta_control_kept": control}  # fmt: skip

    def decide(e, th):
        share = e["recovered_share"]
        if not math.isfinite(share):
            return NOT_MEASURABLE
        if share >= th["recovered_min"] and e["control_recovered_share"] <= th["control_max"] * share:
            return SUPPORTED
        return PARTLY if share >= th["partly_min"] else NOT_SUPPORTED

    return judge("sink_in_use", model, units, effects, decide, SINK_IN_USE, over="windows", min_units=MIN_WINDOWS,
                 fractions=tuple(SINK_IN_USE), evidence=extra, seed=seed, fixed=SINK_IN_USE_FIXED,
                 decides_on=("recovered_share", "control_recovered_share"))  # fmt: skip


def dense_causal_verdict(model: str, cosines: pd.DataFrame, seed: int = 0) -> Verdict:
    """From per-window cosines (window, layer, head (−1: the layer), lam, cos): per head, Δcos = cos(λ = 1) −
    cos(λ = 0) averaged over the (resampled) windows; effects the share of heads (primary) and of layers with
    Δcos > `rise_min`. Supported: both ≥ 1 − `counteract_tol`; partly: either ≥ `partly_frac` (the larger share,
    `best_share_smoothing`, whose interval is then reported)."""
    wide = cosines.pivot_table(index="window", columns=["layer", "head", "lam"], values="cos", aggfunc="first")
    delta = wide.xs(1.0, axis=1, level="lam") - wide.xs(0.0, axis=1, level="lam")  # (W, units)
    is_layer = delta.columns.get_level_values("head").to_numpy() < 0
    units = {"heads": delta.loc[:, ~is_layer].to_numpy(float), "layers": delta.loc[:, is_layer].to_numpy(float)}
    n_heads = units["heads"].shape[1]
    if n_heads < MIN_HEADS:
        return too_few("dense_causal", model, "heads", n_heads, MIN_HEADS, thresholds=DENSE_CAUSAL)

    def effects(u, th):
        heads, layers = u["heads"].mean(0), u["layers"].mean(0)
        shares = float((heads > th["rise_min"]).mean()), float((layers > th["rise_min"]).mean())
        return {"head_share_smoothing": shares[0], "layer_share_smoothing": shares[1],
                "best_share_smoothing": max(shares),
                "median_dcos_head": float(np.median(heads)), "median_dcos_layer": float(np.median(layers))}  # fmt: skip

    def decide(e, th):
        heads, layers = e["head_share_smoothing"], e["layer_share_smoothing"]
        if min(heads, layers) >= 1 - th["counteract_tol"]:
            return SUPPORTED
        return PARTLY if max(heads, layers) >= th["partly_frac"] else NOT_SUPPORTED

    extra = {"n_heads": n_heads, "n_layers": int(units["layers"].shape[1])}
    return judge("dense_causal", model, units, effects, decide, DENSE_CAUSAL, over="windows", min_units=MIN_WINDOWS,
                 fractions=("counteract_tol", "partly_frac"), evidence=extra, seed=seed, fixed=DENSE_FIXED,
                 decides_on=("head_share_smoothing", "layer_share_smoothing"),
                 interval_for={PARTLY: "best_share_smoothing"})  # fmt: skip


def prevalence_verdict(model: str, classes: pd.DataFrame, seed: int = 0) -> Verdict:
    """From one row per (window, layer, head) with its `sink_score` (mean A[t,0]) and `diag_score` (mean A[t,t]):
    symmetric classes at one cut ε, without precedence: a sink head has sink score > ε ≥ diagonal score, a
    diagonal head diagonal score > ε ≥ sink score (a head above ε on both counts in neither: `both_share`). Per
    window the share of sink and of diagonal heads; effect sink share − diagonal share (primary). Supported: sink
    share ≥ `ratio_min` × diagonal share and ≥ `sink_min`; partly: sink share > diagonal share; not measurable
    when neither class occurs. ε is varied like every threshold (the scores are kept)."""
    wide = classes.pivot_table(index="window", columns=["layer", "head"], values=["sink_score", "diag_score"],
                               aggfunc="first")  # fmt: skip
    units = {"sink": wide["sink_score"].to_numpy(float), "diagonal": wide["diag_score"].to_numpy(float)}  # (W, heads)

    def effects(u, th):
        sink_high, diag_high = u["sink"] > th["epsilon"], u["diagonal"] > th["epsilon"]
        sink, diagonal = float((sink_high & ~diag_high).mean()), float((diag_high & ~sink_high).mean())
        if sink == 0 and diagonal == 0:
            return {"sink_minus_diagonal": math.nan}
        return {"sink_minus_diagonal": sink - diagonal, "sink_share": sink, "diagonal_share": diagonal,
                "both_share": float((sink_high & diag_high).mean()),
                "sink_over_diagonal": sink / diagonal if diagonal > 0 else math.inf}  # fmt: skip

    def decide(e, th):
        if not math.isfinite(e["sink_minus_diagonal"]):
            return NOT_MEASURABLE
        if e["sink_share"] >= th["ratio_min"] * e["diagonal_share"] and e["sink_share"] >= th["sink_min"]:
            return SUPPORTED
        return PARTLY if e["sink_share"] > e["diagonal_share"] else NOT_SUPPORTED

    extra = {"heads_per_window": int(units["sink"].shape[1])}
    return judge("prevalence", model, units, effects, decide, PREVALENCE, over="windows", min_units=MIN_WINDOWS,
                 fractions=("sink_min", "epsilon"), evidence=extra, seed=seed, fixed=PREVALENCE_FIXED,
                 decides_on=("sink_minus_diagonal", "sink_share", "diagonal_share"))  # fmt: skip


def cost_boundary_verdict(vocabulary: pd.DataFrame, geometry: pd.DataFrame, seed: int = 0) -> Verdict:
    """Draws where the boundary predicts a winner (not `undecided`), resampled within their (T, d, rank) cell:
    `agreement` = share whose exact winner is the predicted one (primary); `vocabulary_agreement` = share of
    (V, K, norm) rows whose closed-form winner is the exact one (exact, not resampled). Supported: both ≥ 1 −
    `miss_tol`; partly: agreement ≥ `partly_min`."""
    decided = geometry[geometry["cheaper_predicted"] != "undecided"]
    vocab = float((vocabulary["cheaper_closed"] == vocabulary["cheaper_exact"]).mean()) if len(vocabulary) else math.nan
    extra = {"vocabulary_rows": len(vocabulary), "draws": len(geometry), "undecided_draws": len(geometry) - len(decided),
             "predicted_diagonal_draws": int((decided["cheaper_predicted"] == "diagonal").sum())}  # fmt: skip
    cells = (decided["T"].astype(str) + "/" + decided["d"].astype(str) + "/" + decided["rank"].astype(str)).to_numpy()
    units = {"agree": decided["agree"].to_numpy(bool)}

    def effects(u, th):
        return {"agreement": float(u["agree"].mean()), "vocabulary_agreement": vocab}

    def decide(e, th):
        if not math.isfinite(e["vocabulary_agreement"]):
            return NOT_MEASURABLE
        if min(e["agreement"], e["vocabulary_agreement"]) >= 1 - th["miss_tol"]:
            return SUPPORTED
        return PARTLY if e["agreement"] >= th["partly_min"] else NOT_SUPPORTED

    return judge("cost_boundary", "theory", units, effects, decide, COST_BOUNDARY, over="random embedding draws",
                 min_units=MIN_DRAWS, fractions=tuple(COST_BOUNDARY), evidence=extra, strata=cells, seed=seed,
                 fixed=BOUNDARY_FIXED, decides_on=("agreement", "vocabulary_agreement"))  # fmt: skip


def cost_boundary_trained_verdict(runs: pd.DataFrame | None, reason: str = "", seed: int = 0) -> Verdict:
    """Lab runs (`synthetic.boundary_runs`: one row per setting and seed with its `predicted` and trained
    `pattern`), resampled within their setting: `diagonal_side_match` = share of the runs where the diagonal is
    predicted whose switch head is a diagonal (primary); `sink_side_match` = the same for the sink (the control:
    the lab forms the predicted switch where the sink is predicted). Not measurable without runs on both sides or
    when the control is below `control_min`; supported: diagonal_side_match ≥ 1 − `miss_tol`; partly: ≥
    `partly_min`."""
    claim = "cost_boundary_trained"
    if runs is None or runs.empty:
        return Verdict(claim, "synthetic", NOT_MEASURABLE, {}, BOUNDARY_TRAINED, reason or "no runs")
    units = {"predicted": runs["predicted"].to_numpy(str), "pattern": runs["pattern"].to_numpy(str)}
    extra = {"runs": len(runs), "settings": int(runs["setting"].nunique()), "steps": int(runs["steps"].max()),
             "patterns_where_diagonal_predicted": ", ".join(runs.loc[runs["predicted"] == "diagonal", "pattern"]),
             "patterns_where_sink_predicted": ", ".join(runs.loc[runs["predicted"] == "sink", "pattern"])}  # fmt: skip

    def effects(u, th):
        match = u["pattern"] == u["predicted"]
        diagonal, sink = u["predicted"] == "diagonal", u["predicted"] == "sink"
        if not diagonal.any() or not sink.any():
            return {"diagonal_side_match": math.nan}
        return {"diagonal_side_match": float(match[diagonal].mean()), "sink_side_match": float(match[sink].mean()),
                "diagonal_side_sink_share": float((u["pattern"][diagonal] == "sink").mean())}  # fmt: skip

    def decide(e, th):
        if not math.isfinite(e["diagonal_side_match"]) or e["sink_side_match"] < th["control_min"]:
            return NOT_MEASURABLE
        return graded(e["diagonal_side_match"], 1 - th["miss_tol"], th["partly_min"])

    verdict = judge(claim, "synthetic", units, effects, decide, BOUNDARY_TRAINED,
                    over="lab runs (seeds within settings)", min_units=MIN_RUNS, fractions=tuple(BOUNDARY_TRAINED),
                    evidence=extra, strata=runs["setting"].to_numpy(str), seed=seed, fixed=TRAINED_FIXED,
                    decides_on=("diagonal_side_match", "sink_side_match"))  # fmt: skip
    control = verdict.evidence.get("sink_side_match", math.nan)
    if verdict.verdict == NOT_MEASURABLE and control < BOUNDARY_TRAINED["control_min"]:
        return replace(verdict, reason=f"the control fails: {control:.2f} of the runs where the sink is predicted "
                       f"sink (below control_min = {BOUNDARY_TRAINED['control_min']:g})")  # fmt: skip
    return verdict


def eviction_table(losses: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per window: the four losses and the control's position."""
    names = ("full", "recent", "sink", "control")
    return pd.DataFrame({f"loss_{name}": losses[name] for name in names}).assign(
        window=np.arange(len(losses["full"])), control_position=losses["position"],
        T=int(losses["seq_len"]), recent_window=int(losses["window"]))  # fmt: skip


def dense_table(cosines: pd.DataFrame) -> pd.DataFrame:
    """Per (layer, head; −1 = the layer): mean Δcos at λ = 1 over windows, with the windows' min and max."""
    wide = cosines.pivot_table(index=["window", "layer", "head"], columns="lam", values="cos", aggfunc="first")
    delta = (wide[1.0] - wide[0.0]).rename("dcos").reset_index()
    return delta.groupby(["layer", "head"])["dcos"].agg(dcos="mean", dcos_min="min", dcos_max="max").reset_index()


def prevalence_table(classes: pd.DataFrame) -> pd.DataFrame:
    """Per (layer, class): the mean share of the layer's heads over windows (layer −1: the whole model)."""
    frames = []
    for layer, group in pd.concat([classes, classes.assign(layer=-1)]).groupby("layer"):
        share = pd.crosstab(group["window"], group["class"], normalize="index").mean()
        frames.append(pd.DataFrame({"layer": int(layer), "class": share.index, "share": share.to_numpy()}))
    return pd.concat(frames, ignore_index=True)


def judge_experiments(model: str, config: ReproduceConfig, read: dict) -> tuple[list[Verdict], dict[str, pd.DataFrame]]:
    """The verdicts of `sink_in_use`, `dense_causal`, `prevalence`, `switch_assumptions` and `kv_plan_measures` on
    one model from the sections' data (`read`: name of `experiment_sections.experiment_sections`, or `kv_plan` →
    what its `load` returned), and their tables (eviction, dense, prevalence, switch_assumptions; kv_plan). A run of
    some claims only reads some of the sections: the verdicts of those, and the tables of all four or none of the
    first four."""
    corpus, seed = config.corpora[0], config.seed
    verdicts = []
    if "eviction" in read:
        losses = read["eviction"]
        extra = {"T": int(losses["seq_len"]), "recent_window": int(losses["window"]),
                 "loss_full": float(np.mean(losses["full"])), "loss_recent": float(np.mean(losses["recent"]))}  # fmt: skip
        verdicts.append(sink_in_use_verdict(model, losses, extra, seed))
    if "dense" in read:
        verdicts.append(dense_causal_verdict(model, read["dense"], seed))
    if "prevalence" in read:
        verdicts.append(prevalence_verdict(model, read["prevalence"], seed))
    if "assumptions" in read:
        verdicts.append(assumptions_verdict(model, read["assumptions"], seed))
    if "kv_plan" in read:
        verdicts.append(kv_plan_verdict(model, read["kv_plan"], seed))
    tables = {"kv_plan": kv_plan_table(read["kv_plan"])} if "kv_plan" in read else {}
    if {"eviction", "dense", "prevalence", "assumptions"} <= set(read):
        tables |= {"eviction": eviction_table(read["eviction"]), "dense": dense_table(read["dense"]),
                  "prevalence": prevalence_table(read["prevalence"]),
                  "switch_assumptions": assumptions_table(read["assumptions"])}  # fmt: skip
    return [replace(verdict, corpus=corpus) for verdict in verdicts], tables
