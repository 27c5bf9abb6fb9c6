"""The figure of `sinkscope cost-regimes`: the bigram-backcopy costs against V (closed forms as lines, exact
programs as markers) and the map of which pattern is cheaper over (T, rank)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure


def cost_regimes_figure(vocabulary: pd.DataFrame, summary: pd.DataFrame) -> Figure:
    """Left: gBB nuclear costs of sink and diagonal against V (K = the smallest of the table), closed forms as
    lines, exact programs as markers. Right: share of seeds where the diagonal is strictly cheaper per (T, rank)
    (first d of the table), each cell labelled with Wendel's P(H1) and the predicted winner's initial."""
    fig = Figure(figsize=(10, 3.8))
    left, right = fig.subplots(1, 2)
    K = vocabulary["K"].min()
    rows = vocabulary[(vocabulary["K"] == K) & (vocabulary["norm"] == "nuclear")].sort_values("V")
    for pattern, color in (("sink", "#c0392b"), ("diagonal", "#2471a3")):
        left.plot(rows["V"], rows[f"{pattern}_closed"], "-", color=color, label=f"{pattern}, closed form")
        left.plot(rows["V"], rows[f"{pattern}_exact"], "o", color=color, mfc="none", label=f"{pattern}, exact")
    left.set_xlabel(f"vocabulary size V (K = {K} triggers)")
    left.set_ylabel("nuclear cost of W_QK (κ = 1)")
    left.legend(fontsize=7)
    d = summary["d"].min()
    cells = summary[summary["d"] == d]
    Ts, ranks = sorted(cells["T"].unique()), sorted(cells["rank"].unique())
    grid = np.full((len(Ts), len(ranks)), np.nan)
    for _, row in cells.iterrows():
        i, j = Ts.index(row["T"]), ranks.index(row["rank"])
        grid[i, j] = row["diagonal_cheaper"]
        right.text(j, i, f"{row['p_h1']:.2f}\n{row['predicted'][0]}", ha="center", va="center", fontsize=7)
    image = right.imshow(grid, cmap="coolwarm", vmin=0, vmax=1, origin="lower", aspect="auto")
    right.set_xticks(range(len(ranks)), [str(r) for r in ranks])
    right.set_yticks(range(len(Ts)), [str(t) for t in Ts])
    right.set_xlabel(f"rank r of the embeddings (d = {d})")
    right.set_ylabel("T (contexts)")
    right.set_title("share of seeds where the diagonal is cheaper\n(text: P(H1), predicted s/d/u)", fontsize=8)
    fig.colorbar(image, ax=right)
    fig.tight_layout()
    return fig
