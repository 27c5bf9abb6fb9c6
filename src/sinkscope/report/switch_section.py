"""The report's switch / geometry / ablation section (SPEC §3-4, issue 3 part 4): `switch_section` builds the data
(figures, table cell texts, notes), `templates/switch_section.html.j2` the markup.

Figures (`matplotlib.figure.Figure`, embedded as base64 PNG): the 2×2 switched-off × hard-sink table per layer, the sink
margin γ1·γ2 per layer beside the BOS cosine curve, value drain and AHON-LN per head, and the ablation curves
(loss change against the fraction of heads removed, random baseline beside each score). Panels whose columns
a run lacks are left out with a note, so older run directories still render.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.glossary import headers
from sinkscope.report.page import png_figure
from sinkscope.report.plots import figure_png, has_columns, layer_range, layer_ticks, legend_below

# The agreement panel is drawn when at least this share of layers has a switched-off query (else it is mostly gaps:
# a small run, or a model whose heads rarely switch off at τ; the 2×2 counts table still gives every layer).
MIN_AGREEMENT_LAYERS = 0.5
SWITCH_COUNTS = ("switch_n_off_sink", "switch_n_off_nosink", "switch_n_on_sink", "switch_n_on_nosink")
SELECTION_COLORS = {"lowest-ahon-ln": "#2471a3", "highest-hard-sink": "#c0392b", "random": "#7f8c8d"}


def switch_table(heads: pd.DataFrame) -> pd.DataFrame:
    """Per layer: the 2×2 counts summed over heads, agreement P(hard-sink | off) and P(off | hard-sink)."""
    table = heads.groupby("layer")[list(SWITCH_COUNTS)].sum()
    off = table["switch_n_off_sink"] + table["switch_n_off_nosink"]
    sink = table["switch_n_off_sink"] + table["switch_n_on_sink"]
    table["agreement"] = table["switch_n_off_sink"] / off.where(off > 0)
    table["off_given_sink"] = table["switch_n_off_sink"] / sink.where(sink > 0)
    return table.reset_index()


def agreement_defined(table: pd.DataFrame) -> float:
    """Share of layers with at least one switched-off query, i.e. with a defined P(hard sink | off)."""
    return float(table["agreement"].notna().mean()) if len(table) else 0.0


def switch_figure(heads: pd.DataFrame) -> Figure:
    """Left: the 2×2 cell shares per layer (stacked); right, when at least `MIN_AGREEMENT_LAYERS` of the layers have
    a switched-off query: agreement per layer and its spread over heads."""
    table = switch_table(heads)
    shares = table[list(SWITCH_COUNTS)].div(table[list(SWITCH_COUNTS)].sum(axis=1), axis=0)
    with_agreement = agreement_defined(table) >= MIN_AGREEMENT_LAYERS
    fig = Figure(figsize=(10, 3.4) if with_agreement else (5.6, 3.4))
    axes = np.atleast_1d(fig.subplots(1, 2 if with_agreement else 1))
    left = axes[0]
    bottom = np.zeros(len(table))
    labels = ("off & sink", "off & no sink", "on & sink", "on & no sink")
    colors = ("#c0392b", "#f5b7b1", "#5dade2", "#d5d8dc")
    for column, label, color in zip(SWITCH_COUNTS, labels, colors):
        left.bar(table["layer"], shares[column], bottom=bottom, color=color, label=label, width=0.85)
        bottom += shares[column].to_numpy()
    left.set_xlabel("layer")
    left.set_ylabel("share of (head, query) pairs")
    left.set_title("switched off (‖oₜ‖ ≤ τ·mean‖v‖) × hard sink", fontsize=10)
    legend_below(left, len(labels), columns=2)
    layer_range(left, table["layer"])
    if not with_agreement:
        fig.tight_layout()
        return fig
    right = axes[1]
    if "switch_agreement" in heads.columns:
        per_head = heads.pivot(index="layer", columns="head", values="switch_agreement")
        right.plot(per_head.index, per_head.to_numpy(), ".", color="#aab7b8", ms=4)
    right.plot(table["layer"], table["agreement"], "o-", color="#c0392b", label="P(hard sink | off), pooled")
    right.plot(table["layer"], table["off_given_sink"], "s--", color="#2471a3", label="P(off | hard sink), pooled")
    right.set_ylim(-0.03, 1.03)
    right.set_xlim(left.get_xlim())  # the layers' axis even where no query is switched off (no point to draw)
    right.set_xlabel("layer")
    right.set_ylabel("probability")
    right.set_title("switch ⇔ sink agreement (dots: heads)", fontsize=10)
    legend_below(right, 2, columns=1)
    layer_ticks(right)
    fig.tight_layout()
    return fig


def geometry_figure(layers: pd.DataFrame) -> Figure:
    """γ1, γ2 and the sink margin γ1·γ2 per layer (crosses: not representable). The BOS cosine is the analyze
    report's BOS-geometry figure, not repeated here."""
    fig = Figure(figsize=(6.5, 3.6))
    left = fig.subplots()
    margin = layers["gamma1"] * layers["gamma2"]
    left.plot(layers["layer"], layers["gamma1"], "^-", color="#2471a3", ms=4, label="γ1 = dist(0, conv z)")
    left.plot(layers["layer"], layers["gamma2"], "v-", color="#28b463", ms=4, label="γ2 = dist(z₀, conv z)")
    left.plot(layers["layer"], margin, "o-", color="#c0392b", label="γ1·γ2 (best normalised margin)")
    if "sink_representable" in layers.columns:
        failed = layers[~layers["sink_representable"].astype(bool)]
        if not failed.empty:
            left.plot(failed["layer"], np.zeros(len(failed)), "kx", ms=8, label="not representable")
    left.set_xlabel("layer")
    left.set_ylabel("distance (unit-normalised z)")
    left.set_title("sink representability on unit-normalised z", fontsize=10)
    legend_below(left, len(left.get_lines()), columns=2)
    layer_ticks(left)
    fig.tight_layout()
    return fig


def head_grid_figure(heads: pd.DataFrame) -> Figure:
    """Layer × head heatmaps of log10 value drain ‖v₀‖ / mean ‖vⱼ‖ and of AHON-LN (when present)."""
    columns = [c for c in ("value_drain", "ahon_ln") if c in heads.columns]
    fig = Figure(figsize=(4.2 * len(columns) + 0.6, 1.2 + 0.16 * heads["layer"].nunique()))
    for ax, column in zip(np.atleast_1d(fig.subplots(1, len(columns))), columns):
        grid = heads.pivot(index="layer", columns="head", values=column).to_numpy(dtype=float)
        if column == "value_drain":
            grid, title = np.log10(np.clip(grid, 1e-6, None)), "log10 value drain ‖v₀‖/mean‖vⱼ‖"
            image = ax.imshow(grid, aspect="auto", cmap="RdBu", vmin=-2, vmax=2, interpolation="nearest")
        else:
            title = "AHON-LN (head output norm / layer mean)"
            image = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=2, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        layer_ticks(ax, "x")
        layer_ticks(ax, "y")
        fig.colorbar(image, ax=ax, fraction=0.08, label=title.split(" (")[0].split(" ‖")[0])
    fig.tight_layout()
    return fig


def shared_values_note(heads: pd.DataFrame) -> str | None:
    """Why the value-drain heatmap repeats across heads, when it does: value drain reads only the values, and query
    heads that share a key/value head (grouped-query attention) share their values. None when every head differs."""
    if not has_columns(heads, "layer", "head", "value_drain"):
        return None
    H = heads["head"].nunique()
    distinct = heads.groupby("layer")["value_drain"].apply(lambda v: v.round(12).nunique()).max()
    if H < 2 or distinct >= H:
        return None
    if distinct == 1:
        return ("Value drain is constant within each layer: all query heads of a layer read one key/value head (its "
                "values are shared), and value drain ‖v₀‖ / mean ‖vⱼ‖ depends on the values only.")
    return (f"Value drain repeats in blocks of heads: the query heads of a group share one key/value head (at most "
            f"{distinct} distinct values per layer for {H} heads), and value drain depends on the values only.")


def ablation_figure(curve: pd.DataFrame) -> Figure:
    """Loss change against the fraction of heads removed, per selection; random: mean ± std over draws."""
    fig = Figure(figsize=(5.6, 3.6))
    ax = fig.subplots()
    for selection, rows in curve.groupby("selection", sort=True):
        stats = rows.groupby("fraction")["delta_loss"].agg(["mean", "std", "size"]).reset_index()
        color = SELECTION_COLORS.get(selection)
        if selection == "random":
            ax.errorbar(stats["fraction"], stats["mean"], yerr=stats["std"].fillna(0), fmt="o--", color=color,
                        capsize=3, label=f"random (mean ± std, {int(stats['size'].max())} draws)")  # fmt: skip
        else:
            ax.plot(stats["fraction"], stats["mean"], "o-", color=color, label=selection)
    mode = ", ".join(sorted(curve["mode"].unique())) if "mode" in curve.columns else ""
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("fraction of heads removed")
    ax.set_ylabel("Δ next-token loss (nats/token)")
    ax.set_title(f"head ablation ({mode})", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _cell(value, spec: str) -> str:
    """One cell's text: an en dash for a missing value, `spec` "d" an integer, else `format(value, spec)`."""
    if pd.isna(value):
        return "–"
    return str(int(value)) if spec == "d" else format(value, spec)


def _table(frame: pd.DataFrame, formats: dict[str, str]) -> dict:
    """The `table` macro's header and rows: the columns of `formats`, each cell formatted by its spec."""
    return {"header": headers(list(formats)), "rows": [[_cell(row[c], f) for c, f in formats.items()] for _, row in frame.iterrows()]}


def switch_section(heads: pd.DataFrame, layers: pd.DataFrame, ablation: pd.DataFrame | None = None) -> dict:
    """What the section shows: its `heading` (naming sink geometry and ablations only when they are shown), each
    panel (figure, and the 2×2 counts or ablation table) or None when the run lacks its columns, and `missing`,
    the notes on the panels left out."""
    section = {"switch": None, "geometry": None, "head_grid": None, "drain_note": None, "ablation": None, "missing": []}
    if has_columns(heads, "layer", "head", *SWITCH_COUNTS):
        table = switch_table(heads)
        share = agreement_defined(table)
        note = None
        if share < MIN_AGREEMENT_LAYERS:
            note = (f"The agreement P(hard sink | off) per layer is not drawn: only {int(table['agreement'].notna().sum())} "
                    f"of {len(table)} layers have a query switched off at τ (too few windows, or heads that rarely "
                    "switch off); the 2×2 counts below give every layer.")  # fmt: skip
        section["switch"] = {
            "note": note,
            "figure": png_figure(figure_png(switch_figure(heads)),
                                 "Switched-off × hard-sink per layer (docs/theory/geometry.md, the hard switch)"),
            "counts": _table(switch_table(heads), {"layer": "d", **dict.fromkeys(SWITCH_COUNTS, ".0f"),
                                                   "agreement": ".3f", "off_given_sink": ".3f"}),
        }  # fmt: skip
    else:
        section["missing"].append("switch counts missing from heads.parquet")
    if has_columns(layers, "layer", "gamma1", "gamma2"):
        section["geometry"] = png_figure(figure_png(geometry_figure(layers)),
                                         "Sink margin γ1·γ2 per layer (docs/theory/geometry.md, sink representability)")  # fmt: skip
    else:
        section["missing"].append("gamma1/gamma2 missing from layers.parquet")
    section["heading"] = "Attention switch and sink geometry" if section["geometry"] else "Attention switch"
    if has_columns(heads, "layer", "head") and ({"value_drain", "ahon_ln"} & set(heads.columns)):
        section["head_grid"] = png_figure(figure_png(head_grid_figure(heads)),
                                          "Value drain and AHON-LN per head (docs/statistics.md)")  # fmt: skip
        section["drain_note"] = shared_values_note(heads)
    if has_columns(ablation, "selection", "fraction", "delta_loss"):
        section["heading"] = "Attention switch, sink geometry and ablations" if section["geometry"] else \
            "Attention switch and ablations"
        summary = (
            ablation.groupby(["selection", "fraction"])
            .agg(n_heads=("n_heads", "first"), delta_loss=("delta_loss", "mean"), delta_std=("delta_loss", "std"))
            .reset_index()
        )
        section["ablation"] = {
            "figure": png_figure(figure_png(ablation_figure(ablation)), "Loss change when heads are switched off"),
            "table": _table(summary, {"selection": "s", "fraction": ".3f", "n_heads": "d", "delta_loss": "+.4f",
                                      "delta_std": ".4f"}),
        }  # fmt: skip
    return section
