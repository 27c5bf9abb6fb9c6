"""The report's oversmoothing section (SPEC §5, issue 4 part 3): `smoothing_section` builds the data (the summary
numbers as text, figures), `templates/smoothing_section.html.j2` the markup.

Figures (`matplotlib.figure.Figure`, embedded as base64 PNG): predicted vs observed λ-curves for a few heads, the fraction
of heads per layer with `2b + c > 0` beside the fraction whose observed cosine rises, a scatter of predicted vs
observed Δcos = cos(λ=1) - cos(λ=0), and the whole-layer curve ends beside the layer's real attention. Input:
the three tables of `sinkscope.pipelines.smoothing.smoothing_analysis`; missing tables or columns are noted, not fatal.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.page import png_figure
from sinkscope.report.plots import figure_png, has_columns, layer_ticks, legend_below

HEAD_COLUMNS = ("layer", "head", "smooth_b", "smooth_c", "smooth_dense_more", "smooth_dcos_pred", "smooth_dcos_obs")


def _png(fig: Figure, caption: str) -> dict[str, str]:
    return png_figure(figure_png(fig), caption)


def smoothing_summary(heads: pd.DataFrame) -> dict:
    """Model-level numbers: fraction of heads with 2b + c > 0, sign agreement, the counteracting heads."""
    observed_rises = heads["smooth_dcos_obs"] > 0
    summary = {
        "n_heads": len(heads),
        "frac_dense_more": float(heads["smooth_dense_more"].mean()),
        "frac_observed_rise": float(observed_rises.mean()),
        "sign_agreement": float((heads["smooth_dense_more"] == observed_rises).mean()),
        "counteracting": [(int(r.layer), int(r.head)) for r in heads[~heads["smooth_dense_more"]].itertuples()],
        "observed_counteracting": [(int(r.layer), int(r.head)) for r in heads[~observed_rises].itertuples()],
    }
    if "smooth_dense_more_measured" in heads.columns:
        measured = heads["smooth_dense_more_measured"]
        summary["frac_dense_more_measured"] = float(measured.mean())
        summary["sign_agreement_measured"] = float((measured == observed_rises).mean())
    return summary


def pick_heads(heads: pd.DataFrame, count: int = 6) -> pd.DataFrame:
    """Heads worth a curve: the ones whose observed cosine falls most, the median one, the ones it rises most."""
    ranked = heads.sort_values("smooth_dcos_obs").reset_index(drop=True)
    low = count // 2
    picks = list(range(min(low, len(ranked)))) + [len(ranked) // 2] + list(range(len(ranked) - (count - low - 1), len(ranked)))
    return ranked.iloc[sorted({i for i in picks if 0 <= i < len(ranked)})]


def curves_figure(heads: pd.DataFrame, curves: pd.DataFrame) -> Figure:
    """Predicted (SPEC's linearised norm; measured moments) vs observed mean pairwise cosine along λ."""
    picked = pick_heads(heads)
    fig = Figure(figsize=(11, 5.2))
    axes = fig.subplots(2, 3).ravel()
    for ax, row in zip(axes, picked.itertuples()):
        curve = curves[(curves["layer"] == row.layer) & (curves["head"] == row.head)].sort_values("lam")
        ax.plot(curve["lam"], curve["cos_obs"], "o-", color="#c0392b", label="observed")
        ax.plot(curve["lam"], curve["cos_pred"], "s--", color="#2471a3", label="predicted (W̃)")
        if "cos_pred_measured" in curve.columns:
            ax.plot(curve["lam"], curve["cos_pred_measured"], "^:", color="#28b463", label="predicted (measured z)")
        sign = "2b+c>0" if row.smooth_dense_more else "2b+c≤0"
        ax.set_title(f"L{row.layer} H{row.head}  ({sign})", fontsize=9)
        ax.set_xlabel("λ (0 = identity, 1 = causal uniform)", fontsize=8)
        ax.set_ylabel("mean pairwise cosine", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(picked) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fraction_figure(heads: pd.DataFrame) -> Figure:
    """Per layer: share of heads predicted to smooth more when dense, and share observed to."""
    by_layer = heads.groupby("layer")
    fig = Figure(figsize=(9, 3))
    ax = fig.subplots()
    layers = np.array(sorted(heads["layer"].unique()))
    ax.bar(layers, by_layer["smooth_dense_more"].mean().reindex(layers), color="#aed6f1", label="predicted: 2b + c > 0")
    ax.plot(layers, by_layer["smooth_dcos_obs"].apply(lambda s: (s > 0).mean()).reindex(layers), "o-",
            color="#c0392b", label="observed: cos rises from λ=0 to 1")  # fmt: skip
    if "smooth_dense_more_measured" in heads.columns:
        ax.plot(layers, by_layer["smooth_dense_more_measured"].mean().reindex(layers), "^", color="#28b463",
                label="predicted from measured z moments")  # fmt: skip
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("layer")
    ax.set_ylabel("fraction of heads")
    layer_ticks(ax)
    legend_below(ax, 3)
    return fig


def scatter_figure(heads: pd.DataFrame) -> Figure:
    """Predicted vs observed Δcos per head, coloured by layer; the diagonal is perfect agreement."""
    columns = [("smooth_dcos_pred", "predicted Δcos (linearised norm, W̃)")]
    if "smooth_dcos_pred_measured" in heads.columns:
        columns.append(("smooth_dcos_pred_measured", "predicted Δcos (measured z moments)"))
    fig = Figure(figsize=(5 * len(columns), 4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(columns)))
    for ax, (column, label) in zip(axes, columns):
        points = ax.scatter(heads[column], heads["smooth_dcos_obs"], c=heads["layer"], cmap="viridis", s=12)
        low = min(heads[column].min(), heads["smooth_dcos_obs"].min())
        high = max(heads[column].max(), heads["smooth_dcos_obs"].max())
        ax.plot([low, high], [low, high], color="#7f8c8d", lw=0.8)
        ax.axhline(0, color="#bbb", lw=0.6)
        ax.axvline(0, color="#bbb", lw=0.6)
        ax.set_xlabel(label, fontsize=9)
        ax.set_ylabel("observed Δcos", fontsize=9)
    colorbar = fig.colorbar(points, ax=axes[-1], label="layer")
    layer_ticks(colorbar.ax, "y")
    return fig


def layer_figure(layers: pd.DataFrame, curves: pd.DataFrame) -> Figure:
    """Whole layer (all heads' W summed): observed cosine at λ = 0 and 1, the input's, and the real attention's."""
    whole = curves[curves["head"] == -1].pivot(index="layer", columns="lam", values="cos_obs")
    fig = Figure(figsize=(9, 3))
    ax = fig.subplots()
    ax.plot(layers["layer"], layers["smooth_cos_input"], color="#7f8c8d", label="input X")
    ax.plot(whole.index, whole[whole.columns.min()], "s-", color="#2471a3", label="X + Z W_layer (λ=0, identity)")
    ax.plot(whole.index, whole[whole.columns.max()], "o-", color="#c0392b", label="X + U Z W_layer (λ=1, uniform)")
    ax.plot(layers["layer"], layers["smooth_cos_real"], "k^-", label="X + real attention output")
    ax.set_xlabel("layer")
    ax.set_ylabel("mean pairwise cosine")
    layer_ticks(ax)
    legend_below(ax, 4, columns=2)
    return fig


def smoothing_section(heads: pd.DataFrame, layers: pd.DataFrame | None = None, curves: pd.DataFrame | None = None
                      ) -> dict:  # fmt: skip
    """What the section shows: `numbers` (None without the smoothing columns; else the summary's shares as
    percentages, and the measured-moments ones or None), the observed counteracting heads (the first 40, as
    "L1H2"), the figures, and whether the λ-curves are missing."""
    if not has_columns(heads, *HEAD_COLUMNS):
        return {"numbers": None}
    s = smoothing_summary(heads)
    measured = None
    if "sign_agreement_measured" in s:
        measured = {"frac_dense_more": f"{s['frac_dense_more_measured']:.0%}",
                    "sign_agreement": f"{s['sign_agreement_measured']:.0%}"}  # fmt: skip
    figures = [
        _png(fraction_figure(heads), "Fraction of heads per layer with 2b + c > 0, and observed"),
        _png(scatter_figure(heads), "Predicted vs observed Δcos = cos(λ=1) − cos(λ=0), one point per head"),
    ]
    has_curves = has_columns(curves, "layer", "head", "lam", "cos_pred", "cos_obs")
    if has_curves:
        figures.append(_png(curves_figure(heads, curves), "Predicted vs observed λ-curves for a few heads"))
        if has_columns(layers, "layer", "smooth_cos_input", "smooth_cos_real"):
            figures.append(_png(layer_figure(layers, curves), "Whole layer: λ = 0, λ = 1 and the real attention pattern"))
    return {
        "numbers": {"n_heads": s["n_heads"], "frac_dense_more": f"{s['frac_dense_more']:.0%}",
                    "frac_observed_rise": f"{s['frac_observed_rise']:.0%}",
                    "sign_agreement": f"{s['sign_agreement']:.0%}", "measured": measured},
        "counteracting": [f"L{layer}H{head}" for layer, head in s["observed_counteracting"][:40]],
        "figures": figures,
        "curves_missing": not has_curves,
    }  # fmt: skip
