"""Report section: secondary sinks, the tokens other than BOS that later tokens attend to (SPEC §2 key-token table).

Lists the non-BOS tokens with the largest `sink_frac` among those seen at least `MIN_OCCURRENCES` times (rarer
tokens give fractions too noisy to rank), and a heatmap of where in depth each one acts (`sink_frac` per layer).
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.plots import embed_png, figure_png, has_columns

MIN_OCCURRENCES = 20
TOP = 12


def top_sink_tokens(tokens: pd.DataFrame, bos_id: int | None, min_count: int = MIN_OCCURRENCES, top: int = TOP
                    ) -> pd.DataFrame:  # fmt: skip
    """The `top` tokens other than `bos_id` with at least `min_count` occurrences, by `sink_frac` then
    `received_mean`."""
    kept = tokens[(tokens["n"] >= min_count) & (tokens["token_id"] != bos_id)]
    return kept.sort_values(["sink_frac", "received_mean"], ascending=False).head(top)


def depth_heatmap(top: pd.DataFrame, token_layers: pd.DataFrame) -> Figure:
    """Token × layer heatmap of `sink_frac` for the listed tokens."""
    grid = token_layers.pivot(index="token_id", columns="layer", values="sink_frac").reindex(top["token_id"])
    fig = Figure(figsize=(1.5 + 0.25 * grid.shape[1], 0.9 + 0.28 * len(top)))
    ax = fig.subplots()
    image = ax.imshow(grid.to_numpy(), aspect="auto", cmap="magma", vmin=0, vmax=max(1e-3, np.nanmax(grid)),
                      interpolation="nearest")  # fmt: skip
    ax.set_yticks(range(len(top)), [repr(t) for t in top["token"]], fontsize=7)
    ax.set_xlabel("layer")
    ax.set_title("sink_frac per layer (fraction of heads × occurrences with received > ε)", fontsize=9)
    ax.set_ylabel("token")
    fig.colorbar(image, ax=ax, fraction=0.05, label="sink_frac")
    return fig


def tokens_section(tokens: pd.DataFrame | None, token_layers: pd.DataFrame | None, bos_id: int | None,
                   epsilon: float) -> str:  # fmt: skip
    """HTML of the section, or "" for a run without a key-token table."""
    if not has_columns(tokens, "token_id", "token", "n", "received_mean", "sink_frac"):
        return ""
    head = (
        "<h3>Secondary sinks: which tokens besides BOS receive attention</h3><p class='note'>"
        f"received = mean attention a token at position 1..T-2 gets from later tokens; sink_frac = fraction of "
        f"(occurrence, layer, head) with received &gt; ε = {epsilon}. Tokens seen at least {MIN_OCCURRENCES} "
        "times, BOS excluded (docs/statistics.md).</p>"
    )
    top = top_sink_tokens(tokens, bos_id)
    if top.empty:
        return head + f"<p class='note'>No token other than BOS occurs {MIN_OCCURRENCES} times or more.</p>"
    rows = "".join(
        f"<tr><td>{html.escape(repr(row.token))}</td><td class='num'>{row.token_id}</td><td class='num'>{row.n}"
        f"</td><td class='num'>{row.received_mean:.3f}</td><td class='num'>{row.sink_frac:.3f}</td></tr>"
        for row in top.itertuples()
    )
    table = (
        "<table><tr><th>token</th><th>id</th><th>n</th><th>received_mean</th><th>sink_frac</th></tr>"
        f"{rows}</table>"
    )
    figure = ""
    if has_columns(token_layers, "token_id", "layer", "sink_frac"):
        figure = embed_png(figure_png(depth_heatmap(top, token_layers)), "Where in depth the listed tokens act")
    return head + table + figure
