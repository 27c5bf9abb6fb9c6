"""Figures of the gBB regime map (`regimes.run_regimes`), as `matplotlib.figure.Figure` objects (no pyplot state).

- `phase_diagram`: the majority pattern of every cell (colour) with its seed agreement and mean BOS / diagonal
  mass, initialisation scale across, BOS × weight decay down, one panel per attention variant.
- `wqk_cost_figure`: every run's W_QK nuclear/Frobenius ratio (the rank signature SPEC §7 predicts: 1 for a
  sink, ≈ √N for a diagonal) and its nuclear norm against the heuristic minimum-norm prediction.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import NullFormatter

from sinkscope.report.plots import plain_text
from sinkscope.synthetic.summary import PATTERNS

COLOURS = {
    "sink": "#d62728", "diagonal": "#1f77b4", "null": "#9467bd", "gated": "#8c564b", "previous": "#2ca02c",
    "dense": "#c7c7c7", "mixed": "#ff9896",
}


def save_figure(fig: Figure, path: Path, dpi: int = 100) -> None:
    """Write `fig` as a PNG through its own Agg canvas."""
    FigureCanvasAgg(fig)
    with plain_text(fig):  # run names never reach mathtext
        fig.savefig(path, dpi=dpi)


def phase_diagram(cells: pd.DataFrame) -> Figure:
    """Pattern by cell (`regimes.cell_table` rows): one panel per variant, columns = init labels in grid order,
    rows = (BOS, weight decay); each square shows the majority pattern, its agreement and BOS/diag means."""
    variants = list(dict.fromkeys(cells["variant"]))
    inits = list(dict.fromkeys(cells["init"]))
    rows = sorted({(bool(b), float(w)) for b, w in zip(cells["bos"], cells["weight_decay"])}, key=lambda r: (not r[0], r[1]))
    cmap = ListedColormap([COLOURS[p] for p in PATTERNS])
    width = max(7.0, 2.2 + 1.9 * len(inits) * len(variants))
    fig = Figure(figsize=(width, 1.5 + 0.75 * len(rows)), layout="constrained")
    axes = fig.subplots(1, len(variants), squeeze=False)[0]
    for ax, variant in zip(axes, variants):
        grid = [[float("nan")] * len(inits) for _ in rows]
        sub = cells[cells["variant"] == variant]
        for cell in sub.itertuples():
            i, j = rows.index((bool(cell.bos), float(cell.weight_decay))), inits.index(cell.init)
            grid[i][j] = PATTERNS.index(cell.pattern)
            ax.text(j, i, f"{cell.pattern} {cell.agreement}\nBOS {cell.bos_mass:.2f} diag {cell.diag_mass:.2f}",
                    ha="center", va="center", fontsize=7)
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(PATTERNS) - 0.5, aspect="auto")
        ax.set_xticks(range(len(inits)), inits, fontsize=8)
        ax.set_yticks(range(len(rows)), [f"{'BOS' if b else 'no BOS'}, wd {w:g}" for b, w in rows], fontsize=8)
        ax.set_xlabel("initialisation (small → large scale)")
        ax.set_title(f"{variant} attention", fontsize=9)
    axes[0].set_ylabel("BOS, weight decay")
    fig.legend(handles=[Patch(color=COLOURS[p], label=p) for p in PATTERNS], loc="outside lower center",
               ncol=len(PATTERNS), fontsize=7)
    fig.suptitle("gBB regime map: pattern of the dominant switch head on non-trigger queries\n"
                 "(majority over seeds, with agreement; mean BOS and diagonal mass)", fontsize=9)
    return fig


def wqk_cost_figure(rows: pd.DataFrame, cells: pd.DataFrame) -> Figure:
    """Left: nuclear/Frobenius of every run's switch head by cell, with the SPEC §7 predictions for a sink (1)
    and a diagonal (≈ √N). Right: measured nuclear norm against the heuristic prediction (log-log, y = x)."""
    fig = Figure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(2, 1))
    names = list(cells["cell"])
    for pattern, group in rows.groupby("pattern"):
        x = [names.index(c) for c in group["cell"]]
        left.scatter(x, group["wqk_nuc_over_fro"], color=COLOURS[pattern], label=pattern, s=18)
        right.scatter(group["pred_nuclear"], group["wqk_nuclear"], color=COLOURS[pattern], label=pattern, s=18)
    first = cells.iloc[0]
    left.axhline(first["pred_sink_nuc_over_fro"], color=COLOURS["sink"], ls="--", lw=0.8, label="sink, predicted")
    left.axhline(first["pred_diag_nuc_over_fro"], color=COLOURS["diagonal"], ls="--", lw=0.8,
                 label="diagonal, predicted")
    left.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=6)
    left.set_ylabel("‖W_QK‖_* / ‖W_QK‖_F (switch head)")
    left.set_title("Rank signature per run (predicted: sink 1, diagonal ≈ √N)", fontsize=9)
    left.legend(fontsize=7)
    finite = rows[(rows["pred_nuclear"] > 0) & (rows["wqk_nuclear"] > 0)]
    if len(finite):
        lo = min(finite["pred_nuclear"].min(), finite["wqk_nuclear"].min())
        hi = max(finite["pred_nuclear"].max(), finite["wqk_nuclear"].max())
        right.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="measured = predicted")
        right.set_xscale("log")
        right.set_yscale("log")
        for axis in (right.xaxis, right.yaxis):
            axis.set_minor_formatter(NullFormatter())
    right.set_xlabel("predicted ‖W_QK‖_* = κ · cost per κ / mean‖z‖²")
    right.set_ylabel("measured ‖W_QK‖_*")
    right.set_title("Nuclear norm vs the minimum-norm prediction", fontsize=9)
    right.legend(fontsize=7)
    return fig
