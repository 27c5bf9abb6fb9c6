"""Figures of the reproduction report, one per section; each takes evidence tables and returns a
`matplotlib.figure.Figure` built directly (no pyplot state, no backend switch)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.reproduction.strata import middle_layers


def _axes(n: int, width: float = 4.6, height: float = 3.2) -> tuple[Figure, list]:
    """A figure of `n` panels side by side (at least one), `width` × `height` inches each."""
    fig = Figure(figsize=(width * max(n, 1), height))
    return fig, list(fig.subplots(1, max(n, 1), squeeze=False)[0])


def geometry_figure(evidence: dict[str, dict]) -> Figure:
    """Per model: fraction of tokens with cos(x_0, x_t) ≤ 0 on z and h, and the mean cosine on z, by depth over
    every layer (the middle band ¼ … ¾ shaded; the verdict varies it)."""
    fig, axes = _axes(len(evidence))
    for ax, (model, tables) in zip(axes, evidence.items()):
        geometry = tables["geometry"]
        n_layers = int(geometry["layer"].max()) + 1
        middle = middle_layers(n_layers)
        ax.axvspan(min(middle) - 0.5, max(middle) + 0.5, color="#eeeeee", label="middle layers")
        for corpus, group in geometry.groupby("corpus"):
            ax.plot(group["layer"], group["bos_cos_nonpos_frac_z"], "-o", ms=3, label=f"frac cos≤0 (z) · {corpus}")
            if "nonpos_frac_bos_h" in group:
                ax.plot(group["layer"], group["nonpos_frac_bos_h"], "-s", ms=3, label=f"frac cos≤0 (h) · {corpus}")
            ax.plot(group["layer"], group["bos_cos_mean_z"], "--", label=f"mean cos (z) · {corpus}")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set(xlabel="layer", ylim=(-1.05, 1.05), title=model)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def switch_figure(evidence: dict[str, dict]) -> Figure:
    """Per model: P(sink | off) and P(off | sink) as curves over τ (δ as set), one pair per corpus."""
    fig, axes = _axes(len(evidence))
    for ax, (model, tables) in zip(axes, evidence.items()):
        switch = tables["switch"]
        for corpus, group in switch[switch["delta_scale"] == 1.0].groupby("corpus"):
            ax.plot(group["tau"], group["p_sink_given_off"], "-o", ms=3, label=f"P(sink | off) · {corpus}")
            ax.plot(group["tau"], group["p_off_given_sink"], "--s", ms=3, label=f"P(off | sink) · {corpus}")
        ax.set(xscale="log", xlabel="τ (switched off: ‖o_t‖ ≤ τ · mean ‖v_j‖)", ylim=(-0.02, 1.02), title=model)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def smoothing_figure(evidence: dict[str, dict]) -> Figure:
    """Per model: predicted vs observed change of the mean pairwise cosine from λ = 0 to 1, one dot per head."""
    fig, axes = _axes(len(evidence))
    for ax, (model, tables) in zip(axes, evidence.items()):
        heads = tables["heads"]
        if {"smooth_dcos_pred", "smooth_dcos_obs"} <= set(heads.columns):
            ax.scatter(heads["smooth_dcos_pred"], heads["smooth_dcos_obs"], s=8, alpha=0.6)
        ax.axhline(0, color="grey", lw=0.6)
        ax.axvline(0, color="grey", lw=0.6)
        ax.set(xlabel="predicted Δcos (λ: 0 → 1)", ylabel="observed Δcos", title=model)
    fig.tight_layout()
    return fig


def ablation_figure(evidence: dict[str, dict]) -> Figure:
    """Per model: loss change of the sink-like, dormant and random head sets, zeroed and (sink-like, random)
    moved to BOS; dots: every random draw."""
    bars = [("zero", "highest-hard-sink", "sink-like\nzero", "#c0392b"), ("zero", "lowest-ahon-ln", "dormant\nzero",
             "#7d3c98"), ("zero", "random", "random\nzero", "#909497"), ("bos", "highest-hard-sink",
             "sink-like\n→BOS", "#e59866"), ("bos", "random", "random\n→BOS", "#bfc9ca")]  # fmt: skip
    fig, axes = _axes(len(evidence), width=4.6)
    for ax, (model, tables) in zip(axes, evidence.items()):
        curve = tables["ablation"]
        for x, (mode, selection, _, colour) in enumerate(bars):
            values = curve.loc[(curve["mode"] == mode) & (curve["selection"] == selection), "delta_loss"].to_numpy()
            ax.bar(x, values.mean() if values.size else 0.0, color=colour, alpha=0.8)
            ax.plot([x] * values.size, values, "k.", ms=4)
        ax.set_xticks(range(len(bars)), [label for *_, label, _ in bars], fontsize=7)
        ax.set(ylabel="Δ loss (nats/token)", title=model)
    fig.tight_layout()
    return fig


def cost_figure(theory: pd.DataFrame, evidence: dict[str, dict]) -> Figure:
    """Closed-form nuclear costs vs T with the exact programs as dots; diagonal/sink cost per real layer."""
    fig, axes = _axes(2)
    ax = axes[0]
    for (pattern, norm), group in theory.groupby(["pattern", "norm"]):
        style = "-" if norm == "nuclear" else ":"
        ax.plot(group["T"], group["closed_form"], style, label=f"{pattern} {norm} (closed form)")
        exact = group[np.isfinite(group["exact"])]
        ax.plot(exact["T"], exact["exact"], "k.", ms=5)
    ax.set(xscale="log", yscale="log", xlabel="T (contexts)", ylabel="min ‖W_QK‖ (κ = 1)",
           title="orthonormal embeddings (dots: exact programs)")  # fmt: skip
    ax.legend(fontsize=6)
    ax = axes[1]
    for model, tables in evidence.items():
        costs = tables["cost_layers"]
        if costs.empty:
            continue
        wide = costs.pivot_table(index=["T", "layer", "window"], columns="pattern", values="cost", aggfunc="first")
        ratio = (wide["diagonal"] / wide["sink"]).replace([np.inf, -np.inf], np.nan).groupby(["T", "layer"]).median()
        for T, series in ratio.groupby(level="T"):
            ax.plot(series.index.get_level_values("layer"), series.values, "-o", ms=3, label=f"{model} T={T}")
    ax.axhline(1, color="grey", lw=0.6)
    ax.set(yscale="log", xlabel="layer", ylabel="diagonal cost / sink cost", title="real attention inputs")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def weights_figure(evidence: dict[str, dict]) -> Figure:
    """Per model: distributions of W_QK's effective rank and BOS key gain, sink heads vs the others."""
    columns = [("qk_effective_rank", "W_QK effective rank"), ("qk_bos_gain", "W_QK gain on z_0 (key side)"),
               ("vo_bos_gain", "W_VO gain on z_0 (input side)")]  # fmt: skip
    fig = Figure(figsize=(3.6 * len(columns), 2.8 * len(evidence)))
    axes = fig.subplots(len(evidence), len(columns), squeeze=False)
    for row, (model, tables) in zip(axes, evidence.items()):
        weights = tables["weights"]
        for ax, (column, label) in zip(row, columns):
            groups = [weights.loc[weights["is_sink"] == flag, column].dropna().to_numpy() for flag in (True, False)]
            ax.boxplot([g if g.size else [np.nan] for g in groups], tick_labels=["sink heads", "others"])
            for x, values in enumerate(groups, 1):
                ax.plot(np.full(values.size, x) + np.random.default_rng(0).uniform(-0.15, 0.15, values.size), values,
                        ".", ms=3, alpha=0.5)  # fmt: skip
            ax.set_title(f"{model}: {label}", fontsize=8)
    fig.tight_layout()
    return fig


def anchors_figure(evidence: dict[str, dict]) -> Figure:
    """Gu et al.'s sink rate per corpus and model."""
    fig, axes = _axes(1, width=5.0)
    ax = axes[0]
    models = list(evidence)
    for index, model in enumerate(models):
        anchors = evidence[model]["anchors"]
        x = np.arange(len(anchors)) + index * 0.8 / max(len(models), 1)
        ax.bar(x, anchors["sink_rate"], width=0.8 / max(len(models), 1), label=model)
        ax.set_xticks(np.arange(len(anchors)) + 0.4 - 0.4 / max(len(models), 1), anchors["corpus"], fontsize=7)
    ax.set(ylabel="sink rate (ε = 0.3)", ylim=(0, 1))
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
