"""Figure of a switch attribution (`pipelines.switch_attribution`): which route switched off each head's queries.

Left: per layer, the switched-off (head, query) pairs pooled over heads, split by route (stacked shares). Right:
per head, the route that switched off most of its off queries, heads with fewer than `MIN_OFF` off queries grey.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from sinkscope.report.plots import layer_ticks, legend_below

MIN_OFF = 10
ROUTE_COLORS = {"gate": "#8e44ad", "bos_sink": "#c0392b", "learned_sink": "#e67e22", "cancellation": "#2471a3",
                "learned_partial": "#f5b041", "bos_partial": "#f1948a", "self_small_value": "#28b463",
                "low_norm_keys": "#7f8c8d", "unexplained": "#000000"}  # fmt: skip


def routes_of(table: pd.DataFrame) -> list[str]:
    """The route names of a table, in its column order (`share_<route>`)."""
    return [c.removeprefix("share_") for c in table.columns if c.startswith("share_")]


def attribution_figure(table: pd.DataFrame, title: str = "") -> Figure:
    """The two panels of the module doc from one `switch_attribution` table."""
    routes = routes_of(table)
    per_layer = table.groupby("layer")[[f"n_{r}" for r in routes]].sum()
    shares = per_layer.div(per_layer.sum(axis=1).where(lambda s: s > 0), axis=0).fillna(0.0)
    fig = Figure(figsize=(11, 3.8))
    left, right = fig.subplots(1, 2)
    bottom = np.zeros(len(shares))
    for route in routes:
        left.bar(shares.index, shares[f"n_{route}"], bottom=bottom, color=ROUTE_COLORS.get(route, "#aab7b8"),
                 width=0.85, label=route)  # fmt: skip
        bottom += shares[f"n_{route}"].to_numpy()
    left.set_xlabel("layer")
    left.set_ylabel("share of switched-off queries")
    left.set_title(f"route of switched-off queries per layer{title}", fontsize=10)
    legend_below(left, len(routes), columns=3)
    layer_ticks(left)
    counts = table[[f"n_{r}" for r in routes]].to_numpy()
    dominant = np.where(table["n_off"].to_numpy() >= MIN_OFF, counts.argmax(1), len(routes))
    layers, heads = sorted(table["layer"].unique()), sorted(table["head"].unique())
    grid = np.full((len(layers), len(heads)), len(routes))
    for (layer, head), value in zip(zip(table["layer"], table["head"]), dominant):
        grid[layers.index(layer), heads.index(head)] = value
    colors = np.array([to_rgb(ROUTE_COLORS.get(r, "#aab7b8")) for r in routes] + [to_rgb("#eeeeee")])
    right.imshow(colors[grid], aspect="auto", interpolation="nearest")  # RGB cells: no colour scale to resample
    right.set_yticks(range(len(layers)), [str(layer) for layer in layers], fontsize=6)
    right.set_xlabel("head")
    right.set_ylabel("layer")
    right.set_title(f"each head's main route (grey: < {MIN_OFF} queries off)", fontsize=10)
    fig.tight_layout()
    return fig
