"""Report section: secondary sinks, the tokens other than BOS that later tokens attend to (SPEC §2 key-token table).

Lists the non-BOS tokens with the largest `sink_frac` among those seen at least `MIN_OCCURRENCES` times (rarer
tokens give fractions too noisy to rank), and a heatmap of where in depth each one acts (`sink_frac` per layer).
`tokens_section` builds the data (cell texts, the figure); `templates/tokens_section.html.j2` builds the markup.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.glossary import headers
from sinkscope.report.page import png_figure
from sinkscope.report.plots import figure_png, has_columns, layer_ticks

MIN_OCCURRENCES = 20
TOP = 12
HEADER = ("token", "id", "n", "received_mean", "sink_frac")


def top_sink_tokens(tokens: pd.DataFrame, bos_id: int | None, min_count: int = MIN_OCCURRENCES, top: int = TOP
                    ) -> pd.DataFrame:  # fmt: skip
    """The `top` tokens other than `bos_id` with at least `min_count` occurrences, by `sink_frac` then
    `received_mean`."""
    kept = tokens[(tokens["n"] >= min_count) & (tokens["token_id"] != bos_id)]
    return kept.sort_values(["sink_frac", "received_mean"], ascending=False).head(top)


def depth_heatmap(top: pd.DataFrame, token_layers: pd.DataFrame) -> Figure | None:
    """Token × layer heatmap of `sink_frac` for the listed tokens, the colour scale from 0 (white) to the largest
    value drawn; None when every value is 0 (nothing to draw: the note says so)."""
    grid = token_layers.pivot(index="token_id", columns="layer", values="sink_frac").reindex(top["token_id"])
    values = grid.to_numpy(dtype=float)
    if not np.isfinite(values).any() or np.nanmax(values) <= 0:
        return None
    fig = Figure(figsize=(1.5 + 0.25 * grid.shape[1], 0.9 + 0.28 * len(top)))
    ax = fig.subplots()
    image = ax.imshow(values, aspect="auto", cmap="Reds", vmin=0, vmax=float(np.nanmax(values)),
                      interpolation="nearest")  # fmt: skip
    ax.set_yticks(range(len(top)), [repr(t) for t in top["token"]], fontsize=7)
    layer_ticks(ax)
    ax.set_xlabel("layer")
    ax.set_title("sink_frac per layer (fraction of heads × occurrences with received > ε)", fontsize=9)
    ax.set_ylabel("token")
    fig.colorbar(image, ax=ax, fraction=0.05, label="sink_frac")
    return fig


def tokens_section(tokens: pd.DataFrame | None, token_layers: pd.DataFrame | None, bos_id: int | None,
                   epsilon: float) -> dict | None:  # fmt: skip
    """What the section shows, or None for a run without a key-token table: ε and the occurrence floor for its
    note, the table's header cells and cell texts (no rows: no token other than BOS is frequent enough) and the
    depth heatmap (None without the per-layer table, or when no listed token exceeds ε in any layer)."""
    if not has_columns(tokens, "token_id", "token", "n", "received_mean", "sink_frac"):
        return None
    top = top_sink_tokens(tokens, bos_id)
    rows = [[repr(row.token), str(row.token_id), str(row.n), f"{row.received_mean:.3f}", f"{row.sink_frac:.3f}"]
            for row in top.itertuples()]  # fmt: skip
    figure, all_zero = None, False
    if not top.empty and has_columns(token_layers, "token_id", "layer", "sink_frac"):
        heatmap = depth_heatmap(top, token_layers)
        all_zero = heatmap is None
        if heatmap is not None:
            figure = png_figure(figure_png(heatmap), "Where in depth the listed tokens act")
    return {"epsilon": str(epsilon), "min_occurrences": MIN_OCCURRENCES, "header": headers(HEADER), "rows": rows,
            "figure": figure, "all_zero": all_zero}  # fmt: skip
