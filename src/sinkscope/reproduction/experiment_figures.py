"""The figures of issue 36's claims in the reproduction report, one per claim, from the tables the report links
(`experiment_claims.*_table`, the cost-regime tables, the boundary lab's runs). Each returns a
`matplotlib.figure.Figure`; `claim_figures` builds those whose data this reproduction has."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.plots import HEAD_CLASS_COLORS

SIDE_COLORS = {"sink": "#c0392b", "diagonal": "#2471a3", "undecided": "#909497"}
CLAIM_FIGURES = ("sink_in_use", "dense_causal", "prevalence", "switch_assumptions", "cost_boundary",
                 "cost_boundary_trained")  # the claims with a figure of their own, named figures/CLAIM.png


def _axes(n: int, width: float = 4.6, height: float = 3.2) -> tuple[Figure, list]:
    """A figure of `n` panels side by side (at least one), `width` × `height` inches each."""
    fig = Figure(figsize=(width * max(n, 1), height))
    return fig, list(fig.subplots(1, max(n, 1), squeeze=False)[0])


def mean_interval(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its normal 95 % interval over units, 1.96 · sd / √n (0 for one unit)."""
    values = np.asarray(values, float)
    half = 1.96 * values.std(ddof=1) / np.sqrt(values.size) if values.size > 1 else 0.0
    return float(values.mean()), float(half)


def eviction_figure(evidence: dict[str, dict]) -> Figure:
    """Per model: Δ loss against the full cache (nats/token, mean over windows with its 95 % interval) of the recent
    window alone, the window plus BOS, and the window plus one random early token (the control)."""
    bars = (("recent", "window\nonly", "#555555"), ("sink", "window\n+ BOS", "#c0392b"),
            ("control", "window + random\nearly token", "#909497"))  # fmt: skip
    fig, axes = _axes(len(evidence), width=4.2)
    for ax, (model, tables) in zip(axes, evidence.items()):
        table = tables["eviction"]
        for x, (name, _, colour) in enumerate(bars):
            mean, half = mean_interval(table[f"loss_{name}"] - table["loss_full"])
            ax.bar(x, mean, yerr=half, capsize=3, color=colour, alpha=0.85)
        ax.set_xticks(range(len(bars)), [label for _, label, _ in bars], fontsize=7)
        window = int(table["recent_window"].iloc[0]) if len(table) else 0
        ax.set(ylabel="Δ loss vs full cache (nats/token)", title=f"{model}: recent window of {window} keys")
    fig.tight_layout()
    return fig


def dense_figure(evidence: dict[str, dict]) -> Figure:
    """Per model: Δ mean pairwise cosine of the residual leaving the layer when one head (dots) or the whole layer
    (line) attends uniformly instead of with its own attention, mean over windows, by layer."""
    fig, axes = _axes(len(evidence))
    for ax, (model, tables) in zip(axes, evidence.items()):
        table = tables["dense"]
        heads, layers = table[table["head"] >= 0], table[table["head"] < 0].sort_values("layer")
        ax.scatter(heads["layer"], heads["dcos"], s=8, alpha=0.6, color="#2471a3", label="one head uniform")
        ax.plot(layers["layer"], layers["dcos"], "s-", ms=3, color="#6c3483", label="whole layer uniform")
        ax.axhline(0, color="black", lw=0.6)
        ax.set(xlabel="layer", ylabel="Δ cos, own → uniform (λ = 1)", title=model)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def prevalence_figure(evidence: dict[str, dict]) -> Figure:
    """Per model: per layer the mean share of its heads in each class over windows (stacked)."""
    fig, axes = _axes(len(evidence))
    for ax, (model, tables) in zip(axes, evidence.items()):
        table = tables["prevalence"]
        per_layer = table[table["layer"] >= 0].pivot_table(index="layer", columns="class", values="share").fillna(0)
        bottom = np.zeros(len(per_layer))
        for name, colour in HEAD_CLASS_COLORS.items():
            if name in per_layer:
                ax.bar(per_layer.index, per_layer[name], bottom=bottom, color=colour, label=name, width=0.85)
                bottom += per_layer[name].to_numpy()
        ax.set(xlabel="layer", ylabel="share of heads (mean over windows)", ylim=(0, 1.05))
        ax.set_title(model, pad=20)
        ax.legend(fontsize=6, ncol=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def assumptions_figure(evidence: dict[str, dict]) -> Figure:
    """Per model, by layer: BOS's distance from the contexts' span (median and smallest over windows), the share of
    windows where the theorem's assumptions hold, and P(hard sink | switched off) at τ = δ = 0.1."""
    fig, axes = _axes(len(evidence))
    for ax, (model, tables) in zip(axes, evidence.items()):
        table = tables["switch_assumptions"]
        ax.plot(table["layer"], table["span_distance_median"], "o-", ms=3, color="#2471a3",
                label="|z₀ − P z₀| / |z₀|, median")  # fmt: skip
        ax.plot(table["layer"], table["span_distance_min"], ":", color="#2471a3", label="… smallest window")
        ax.plot(table["layer"], table["holds_frac"], "s--", ms=3, color="#28b463", label="share of windows: hold")
        off = table["switched_off"].to_numpy(float)
        agreement = np.divide(table["switched_off_sink"], off, out=np.full(off.size, np.nan), where=off > 0)
        ax.scatter(table["layer"], agreement, s=14, color="#6c3483", zorder=3, label="P(hard sink | off)")
        ax.set(xlabel="layer", ylim=(-0.05, 1.05), title=model)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def boundary_trained_figure(runs: pd.DataFrame) -> Figure:
    """Per lab setting (V, T, d), the switch head's BOS and diagonal mass on non-trigger queries, one dot per
    seed, the setting's predicted side in its colour; 0.5 is the classifier's line."""
    fig, axes = _axes(1, width=6.4, height=3.4)
    ax = axes[0]
    settings = list(dict.fromkeys(runs["setting"]))
    for x, setting in enumerate(settings):
        group = runs[runs["setting"] == setting]
        predicted = str(group["predicted"].iloc[0])
        ax.axvspan(x - 0.45, x + 0.45, color=SIDE_COLORS.get(predicted, "#909497"), alpha=0.08)
        jitter = np.linspace(-0.08, 0.08, len(group))
        ax.plot(x - 0.15 + jitter, group["bos_mass"], "o", color="#c0392b", label="BOS mass" if x == 0 else None)
        ax.plot(x + 0.15 + jitter, group["diag_mass"], "D", color="#2471a3", label="diagonal mass" if x == 0 else None)
    ax.axhline(0.5, color="grey", lw=0.6, ls=":")
    labels = [f"{s.replace('_', ' ')}\npredicted {runs.loc[runs['setting'] == s, 'predicted'].iloc[0]}" for s in settings]
    ax.set_xticks(range(len(settings)), labels, fontsize=7)
    ax.set(ylim=(-0.02, 1.02), ylabel="switch head's mass (non-trigger queries)",
           title="lab trained on each side of the predicted boundary (dots: seeds)")  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def claim_figures(evidence: dict[str, dict], extra: dict[str, pd.DataFrame]) -> dict[str, Figure]:
    """`{claim: Figure}` for issue 36's claims whose tables this reproduction has (`extra`: the model-free tables
    `cost_regimes` (geometry), `cost_regimes_vocabulary`, `cost_boundary_trained`)."""
    from sinkscope.pipelines.cost_regimes import regime_summary
    from sinkscope.report.cost_regimes_section import cost_regimes_figure

    out = {}
    per_model = (("sink_in_use", "eviction", eviction_figure), ("dense_causal", "dense", dense_figure),
                 ("prevalence", "prevalence", prevalence_figure),
                 ("switch_assumptions", "switch_assumptions", assumptions_figure))  # fmt: skip
    for claim, table, draw in per_model:
        having = {model: tables for model, tables in evidence.items() if table in tables}
        if having:
            out[claim] = draw(having)
    if {"cost_regimes", "cost_regimes_vocabulary"} <= set(extra):
        out["cost_boundary"] = cost_regimes_figure(extra["cost_regimes_vocabulary"], regime_summary(extra["cost_regimes"]))
    if "cost_boundary_trained" in extra:
        out["cost_boundary_trained"] = boundary_trained_figure(extra["cost_boundary_trained"])
    return out
