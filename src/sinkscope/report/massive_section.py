"""Report section: massive activations (Sun et al. 2024), the few residual-stream entries orders of magnitude larger
than the layer's median, and whether BOS carries them (`statistics.massive_activations`; docs/statistics.md §
Massive activations).

`massive_section` builds one run's data (a figure across depth, a per-layer table); `massive_comparison` one figure
of every run's ratio max |h| / median |h| against relative depth, for the comparison page. Runs written before the
statistic existed have no `massive_*` columns: the section is then None and not drawn.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.glossary import Term, headers
from sinkscope.report.page import png_figure
from sinkscope.report.plots import figure_png, has_columns, layer_ticks, legend_below, series_styles

SECTION = "docs/statistics.md § Massive activations"
TERMS = {
    "layer": Term("decoder layer; the residual stream h is the input of that layer", SECTION),
    "max |h|": Term("largest |h[t, c]| over windows, positions t and channels c (massive_max)", SECTION),
    "position": Term("token position of the largest entry (0 = BOS) (massive_position)", SECTION),
    "channel": Term("channel c of the largest entry (massive_channel)", SECTION),
    "median |h|": Term("median |h| over every entry of the layer, from a histogram of 1/8-octave bins", SECTION),
    "max / median": Term("massive_ratio = max |h| / median |h|; Sun et al. call entries ~1000× the median massive",
                         SECTION),
    "BOS max": Term("largest |h[0, c]| (BOS) over channels (massive_bos_max)", SECTION),
    "rest max": Term("largest |h[t, c]| over positions t ≥ 1 (massive_rest_max)", SECTION),
    "on BOS": Term("whether the layer's largest entry is at BOS (massive_on_bos)", SECTION),
}  # fmt: skip
HEADER = tuple(TERMS)
COLUMNS = ("massive_max", "massive_position", "massive_channel", "massive_median", "massive_ratio",
           "massive_bos_max", "massive_rest_max", "massive_on_bos")  # fmt: skip


def massive_figure(layers: pd.DataFrame) -> Figure:
    """Across depth, on a log scale: the largest |h| at BOS and at the other positions, and the median |h|."""
    fig = Figure(figsize=(6.5, 3.6))
    ax = fig.subplots()
    ax.plot(layers["layer"], layers["massive_bos_max"], "o-", color="#c0392b", label="max |h| at BOS")
    ax.plot(layers["layer"], layers["massive_rest_max"], "s--", color="#2471a3", label="max |h| at t ≥ 1")
    ax.plot(layers["layer"], layers["massive_median"], "^:", color="#7f8c8d", label="median |h|")
    ax.set_yscale("log")
    ax.set_xlabel("layer (residual stream entering it)")
    ax.set_ylabel("|h|")
    ax.set_title("massive activations: largest entries against the median", fontsize=10)
    legend_below(ax, 3)
    layer_ticks(ax)
    fig.tight_layout()
    return fig


def massive_section(layers: pd.DataFrame | None) -> dict | None:
    """The figure and per-layer cell texts of one run, or None for a run without the massive_* columns."""
    if not has_columns(layers, "layer", *COLUMNS):
        return None
    rows = [[str(r.layer), f"{r.massive_max:.4g}", str(r.massive_position), str(r.massive_channel),
             f"{r.massive_median:.3g}", f"{r.massive_ratio:.4g}", f"{r.massive_bos_max:.4g}",
             f"{r.massive_rest_max:.4g}", "yes" if r.massive_on_bos else "no"] for r in layers.itertuples()]  # fmt: skip
    on_bos = int(layers["massive_on_bos"].sum())
    peak = layers.loc[layers["massive_ratio"].idxmax()]
    note = (f"BOS carries the largest entry in {on_bos} of {len(layers)} layers; the largest ratio to the median is "
            f"{peak.massive_ratio:.4g} (layer {int(peak.layer)}, channel {int(peak.massive_channel)}, position "
            f"{int(peak.massive_position)}).")  # fmt: skip
    return {"figure": png_figure(figure_png(massive_figure(layers)), "Massive activations across depth"),
            "header": headers(HEADER, terms=TERMS), "rows": rows, "note": note}  # fmt: skip


def massive_comparison(runs: list, names: list[str]) -> dict | None:
    """One figure: every run's max |h| / median |h| (solid) and BOS's max |h| / median (dotted) against relative
    depth layer / (L − 1); None when no run has the columns."""
    having = [(run, name) for run, name in zip(runs, names) if has_columns(run.layers, "layer", *COLUMNS)]
    if not having:
        return None
    fig = Figure(figsize=(7, 3.8))
    ax = fig.subplots()
    for (run, name), style in zip(having, series_styles(len(having))):
        layers = run.layers
        depth = layers["layer"] / max(len(layers) - 1, 1)
        ax.plot(depth, layers["massive_ratio"], label=f"{name}: max / median", **style)
        ax.plot(depth, layers["massive_bos_max"] / layers["massive_median"], color=style["color"], linestyle=":",
                label=f"{name}: BOS max / median")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("relative depth layer / (L − 1)")
    ax.set_ylabel("|h| / median |h|")
    ax.set_title("massive activations across depth", fontsize=10)
    legend_below(ax, 2 * len(having), columns=2)
    fig.tight_layout()
    return {"figure": png_figure(figure_png(fig), "Massive activations: the largest |h| over the median, per run")}
