"""From the sections' tables to the numbers each verdict function takes (`reproduce.claims`), and the evidence
tables the report shows. No model, no I/O: tables in, verdicts and tables out."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from sinkscope.reproduction import claims as c
from sinkscope.reproduction.config import ReproduceConfig

SINK_HEAD_HARD_FRAC = c.VALUE_DRAIN["sink_head_hard_sink_frac"]
GEOMETRY_COLUMNS = ["layer", "bos_cos_mean_z", "bos_cos_max_z", "bos_cos_nonpos_frac_z", "bos_cos_mean_h",
                    "bos_cos_max_h", "bos_cos_nonpos_frac_h", "bos_norm_ratio_h", "gamma1", "gamma2", "sink_margin",
                    "h1", "h2", "context_rank", "sink_span_distance", "mlp_like_frac"]  # fmt: skip
HEAD_COLUMNS = ["layer", "head", "head_class", "sink_score", "hard_sink_frac", "hard_diag_frac", "ahon_ln",
                "value_drain", "switch_off_frac", "switch_agreement", "smooth_b", "smooth_c", "smooth_dense_more",
                "smooth_dcos_pred", "smooth_dcos_obs", "smooth_sign_agree"]  # fmt: skip
WEIGHT_COLUMNS = ["layer", "head", "qk_sigma1", "qk_nuclear_over_frobenius", "qk_effective_rank", "qk_bos_alignment",
                  "qk_bos_gain", "vo_sigma1", "vo_nuclear_over_frobenius", "vo_effective_rank", "vo_bos_alignment",
                  "vo_bos_gain"]  # fmt: skip


def _columns(frame: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    return frame[[name for name in names if name in frame.columns]]


def corpus_verdicts(model: str, corpus: str, run) -> list[c.Verdict]:
    """Sections 1-3 on one analysed corpus (a `Run` with the smoothing columns)."""
    layers, heads = run.layers, run.heads
    nan_layers = [math.nan] * len(layers)
    out = [
        c.geometry_verdict(model, layers["bos_cos_nonpos_frac_z"], layers["bos_cos_max_z"]),
        c.representability_verdict(model, layers["sink_margin"] if "sink_margin" in layers else nan_layers),
    ]
    smooth = run.meta.get("smoothing", {})
    out.append(c.oversmoothing_verdict(model, smooth.get("frac_dense_more", math.nan),
                                       smooth.get("frac_observed_rise", math.nan),
                                       smooth.get("sign_agreement", math.nan), int(smooth.get("n_heads", 0))))  # fmt: skip
    counts = [int(heads[f"switch_n_{k}"].sum()) for k in ("off_sink", "off_nosink", "on_sink", "on_nosink")]
    out.append(c.switch_verdict(model, *counts))
    sinks = heads["hard_sink_frac"] >= SINK_HEAD_HARD_FRAC
    out.append(c.value_drain_verdict(model, heads.loc[sinks, "value_drain"], heads.loc[~sinks, "value_drain"]))
    out.append(c.mlp_like_verdict(model, layers["mlp_like_frac"]))
    return [replace(verdict, corpus=corpus) for verdict in out]


def ablation_verdicts(model: str, corpus: str, ablation: pd.DataFrame, heads: pd.DataFrame) -> list[c.Verdict]:
    """Sink-like and dormant head sets against the random sets of the same size (`sinkscope.pipelines.ablate` curve)."""
    out = []
    for claim, selection, mode in (("sink_ablation", "highest-hard-sink", "zero"),
                                   ("sink_ablation_bos", "highest-hard-sink", "bos"),
                                   ("dormant_heads", "lowest-ahon-ln", "zero")):  # fmt: skip
        frame = ablation[ablation["mode"] == mode]
        chosen = frame[frame["selection"] == selection]
        if chosen.empty:
            out.append(c.Verdict(claim, model, c.NOT_MEASURABLE, reason=f"no {selection} set ({mode})", corpus=corpus))
            continue
        row = chosen.iloc[0]
        random = frame[(frame["selection"] == "random") & (frame["n_heads"] == row["n_heads"])]
        extra = {"mode": mode, "n_heads": int(row["n_heads"]), "fraction": float(row["fraction"]), "base_loss": float(row["base_loss"]),
                 "delta_sem": float(row["delta_sem"]), "n_windows": int(row["n_windows"])}  # fmt: skip
        if claim == "dormant_heads":
            extra |= {"dormant_frac": float((heads["ahon_ln"] <= c.DORMANT_AHON_LN).mean()),
                      "dormant_ahon_ln": c.DORMANT_AHON_LN}  # fmt: skip
        verdict = c.ablation_verdict(claim, model, float(row["delta_loss"]), random["delta_loss"].tolist(), extra)
        out.append(replace(verdict, corpus=corpus))
    return out


def cost_layers_verdict(model: str, corpus: str, costs: pd.DataFrame) -> c.Verdict:
    wide = costs.pivot_table(index=["layer", "window"], columns="pattern", values="cost", aggfunc="first")
    return replace(c.cost_real_verdict(model, wide["sink"].to_numpy(), wide["diagonal"].to_numpy()), corpus=corpus)


def weight_heads(weights: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    """The weight statistics joined with each head's class and sink scores (from the first corpus)."""
    info = _columns(heads, ["layer", "head", "head_class", "sink_score", "hard_sink_frac"])
    frame = _columns(weights, WEIGHT_COLUMNS).merge(info, on=["layer", "head"], how="left")
    return frame.assign(is_sink=frame["head_class"] == "sink")


def weight_verdicts(model: str, corpus: str, table: pd.DataFrame) -> list[c.Verdict]:
    """Sink heads (head class `sink`: mean sink score α > ε = 0.3, Gu et al.'s criterion) vs the others: W_QK
    effective rank and BOS key gain. (Heads that are hard-sink on most queries are too few for a distribution:
    16 of 270 in SmolLM2, 1 of 72 in Gemma-3.)"""
    sinks = table["is_sink"]
    return [
        replace(c.weights_verdict("weights_low_rank", model, table.loc[sinks, "qk_effective_rank"],
                                  table.loc[~sinks, "qk_effective_rank"], sink_lower=True), corpus=corpus),
        replace(c.weights_verdict("weights_bos_alignment", model, table.loc[sinks, "qk_bos_gain"],
                                  table.loc[~sinks, "qk_bos_gain"], sink_lower=False), corpus=corpus),
    ]  # fmt: skip


def anchor_rates(runs: dict) -> dict[str, float]:
    """Gu et al.'s sink rate (the analysis summary's `sink_rate`) on natural, random and repeated tokens."""
    names = {"builtin:prose": "natural", "builtin:random": "random", "builtin:repeat": "repeat"}
    return {label: float(runs[corpus].meta["summary"]["sink_rate"]) for corpus, label in names.items() if corpus in runs}


def judge_model(
    model: str, config: ReproduceConfig, runs: dict, ablation: pd.DataFrame, costs: pd.DataFrame,
    weights: pd.DataFrame,
) -> tuple[list[c.Verdict], dict[str, pd.DataFrame]]:  # fmt: skip
    """Every per-model verdict, and the evidence tables: geometry (per corpus, layer), heads (first corpus),
    weights (per head, with class), ablation, cost_layers, anchors."""
    first = config.corpora[0]
    verdicts = []
    for corpus in config.corpora:
        verdicts += corpus_verdicts(model, corpus, runs[corpus])
    heads = runs[first].heads
    verdicts += ablation_verdicts(model, first, ablation, heads)
    verdicts.append(cost_layers_verdict(model, first, costs))
    weight_table = weight_heads(weights, heads)
    verdicts += weight_verdicts(model, first, weight_table)
    rates = anchor_rates(runs)
    verdicts.append(replace(c.gu_sink_rate_verdict(model, rates), corpus="builtin:prose,random,repeat"))
    geometry = pd.concat(
        [_columns(runs[corpus].layers, GEOMETRY_COLUMNS).assign(corpus=corpus) for corpus in config.corpora],
        ignore_index=True,
    )
    anchors = pd.DataFrame(
        [{"corpus": corpus, "sink_rate": runs[corpus].meta["summary"]["sink_rate"],
          "sink_rate_of_mean": runs[corpus].meta["summary"].get("sink_rate_of_mean"),
          "mean_sink_score": runs[corpus].meta["summary"]["mean_sink_score"],
          "windows": runs[corpus].meta["corpus"].get("windows")} for corpus in runs]
    )  # fmt: skip
    tables = {
        "geometry": geometry,
        "heads": _columns(heads, HEAD_COLUMNS),
        "weights": weight_table,
        "ablation": ablation,
        "cost_layers": costs,
        "anchors": anchors,
    }
    return verdicts, tables


def fit_exponent(T: np.ndarray, cost: np.ndarray) -> float:
    """Slope of log cost on log T (least squares)."""
    return float(np.polyfit(np.log(T), np.log(cost), 1)[0])


def judge_theory(theory: pd.DataFrame, regimes: dict) -> list[c.Verdict]:
    """Model-free claims: closed-form exponents (nuclear cost, T ≥ 64) with the exact programs' agreement, and
    the bigram-backcopy regimes."""
    nuclear = theory[(theory["norm"] == "nuclear") & (theory["T"] >= 64)]
    exponents = {
        pattern: fit_exponent(group["T"].to_numpy(float), group["closed_form"].to_numpy(float))
        for pattern, group in nuclear.groupby("pattern")
    }
    solved = theory[np.isfinite(theory["exact"])]
    error = float(((solved["exact"] - solved["closed_form"]).abs() / solved["closed_form"]).max()) if len(solved) else (
        math.nan
    )
    closed = c.cost_closed_forms_verdict("theory", exponents.get("sink", math.nan),
                                         exponents.get("diagonal", math.nan), error)  # fmt: skip
    regime = c.regimes_verdict("synthetic", regimes.get("inits"), regimes.get("reason", ""))
    return [closed, regime]
