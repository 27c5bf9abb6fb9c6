"""Figures and page of a trajectory through training (`sinkscope trajectory`, `SinkscopeCallback`).

From `trajectory.parquet` (one row per step, layer, head): per-layer curves against step of the sink rate (a
train-bb run has none), the sink, diagonal and previous-token scores, the attention entropy and the switched-off
fraction (means over the layer's heads), a head × step map of the head class, a per-step summary and the emergence table. Header cells carry the
analyze pages' definitions (`glossary.TERMS`) plus this page's own (`TRAJECTORY_TERMS`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from sinkscope.report.glossary import HEADS, TERMS, Term, definitions, headers
from sinkscope.report.page import cell_text, png_figure, write_page
from sinkscope.report.plots import HEAD_CLASS_COLORS, figure_png, figure_svg, no_mathtext, series_styles

TRAJECTORY = "docs/trajectory.md § What the trajectory measures"
TRAJECTORY_TERMS: dict[str, Term] = {
    "step": Term("the training step of the checkpoint (or of the callback's analysis)", TRAJECTORY),
    "layer": TERMS["layer"],
    "head": Term("the head within its layer", HEADS),
    "sink rate": TERMS["sink rate"],
    "mean sink": TERMS["mean sink"],
    "mean diag": TERMS["mean diag"],
    "sink heads": Term("number of heads of class sink (window-mean α > ε)", HEADS),
    "diagonal heads": Term("number of heads of class diagonal (window-mean diagonal score above its threshold, "
                           "and not a sink)", HEADS),  # fmt: skip
    "pattern": Term("sink (score α = mean_t A[t,0]) or diagonal (score mean_t A[t,t])", TRAJECTORY),
    "threshold": Term("the score the pattern must stay above: ε for a sink, the diagonal threshold for a diagonal",
                      TRAJECTORY),  # fmt: skip
    "emergence_step": Term("the first step after which the head's score stays above the threshold up to the last "
                           "step", TRAJECTORY),  # fmt: skip
    "from_first": Term("whether the score was already above the threshold at the first step analysed (then the "
                       "pattern emerged at or before it)", TRAJECTORY),  # fmt: skip
    "final_score": Term("the head's score at the last step", TRAJECTORY),
}
# (column of trajectory.parquet, label): the per-layer curves against step; `layer_sink_rate` is per layer already.
CURVES = (("layer_sink_rate", "sink rate (per-window α > ε)"), ("sink_score", "sink score α"),
          ("diag_score", "diagonal score"),
          ("prev_score", "previous-token score"), ("entropy", "attention entropy (normalised)"),
          ("switch_off_frac", "switched-off fraction"))  # fmt: skip
CLASS_ORDER = list(HEAD_CLASS_COLORS)


def layer_curves(table: pd.DataFrame) -> Figure:
    """One panel per `CURVES` statistic: its mean over each layer's heads against step, a line per layer."""
    shown = [(c, label) for c, label in CURVES if c in table.columns]
    means = table.groupby(["layer", "step"], sort=True)[[c for c, _ in shown]].mean().reset_index()
    layers = sorted(means["layer"].unique())
    styles = series_styles(len(layers))
    fig = Figure(figsize=(3.3 * len(shown), 3.0))
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    for ax, (column, label) in zip(axes, shown):
        for layer, style in zip(layers, styles):
            line = means[means["layer"] == layer]
            ax.plot(line["step"], line[column], marker=".", label=f"layer {layer}", **style)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False,
               ncol=min(8, len(labels)))  # fmt: skip
    return fig


def class_map(table: pd.DataFrame) -> Figure:
    """Head × step map of the head class (rows L<layer>H<head>, columns the steps), coloured as analyze's."""
    grid = table.pivot(index=["layer", "head"], columns="step", values="head_class")
    codes = grid.apply(lambda column: column.map(CLASS_ORDER.index)).to_numpy(dtype=float)
    steps = list(grid.columns)
    fig = Figure(figsize=(min(12.0, 2.5 + 0.3 * len(steps)), min(12.0, 1.4 + 0.16 * len(grid))))
    ax = fig.subplots()
    ax.imshow(codes, aspect="auto", interpolation="nearest", vmin=-0.5, vmax=len(CLASS_ORDER) - 0.5,
              cmap=ListedColormap(list(HEAD_CLASS_COLORS.values())))  # fmt: skip
    every = max(1, len(steps) // 12)
    ax.set_xticks(range(0, len(steps), every), [str(s) for s in steps[::every]], fontsize=7, rotation=45)
    every = max(1, len(grid) // 24)
    ax.set_yticks(range(0, len(grid), every), [f"L{l}H{h}" for l, h in grid.index[::every]], fontsize=7)
    ax.set_xlabel("step")
    present = [c for c in CLASS_ORDER if c in set(table["head_class"])]
    for name in present:
        ax.plot([], [], "s", color=HEAD_CLASS_COLORS[name], label=name)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(present), frameon=False)
    ax.set_title("head class", fontsize=10)
    return fig


def step_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per step: the sink rate (mean of the heads' per-window sink rates: every head sees every window), the mean
    sink and diagonal scores, and the number of sink and diagonal heads. A train-bb run has no per-window rates:
    its table has no sink rate column."""
    grouped = table.groupby("step", sort=True)
    rate = {"sink rate": grouped["sink_rate"].mean()} if "sink_rate" in table.columns else {}
    return pd.DataFrame({
        **rate, "mean sink": grouped["sink_score"].mean(),
        "mean diag": grouped["diag_score"].mean(),
        "sink heads": grouped["head_class"].apply(lambda c: int((c == "sink").sum())),
        "diagonal heads": grouped["head_class"].apply(lambda c: int((c == "diagonal").sum())),
    }).reset_index()  # fmt: skip


def _rows(frame: pd.DataFrame) -> list[list[str]]:
    return [[cell_text(v) for v in row] for row in frame.round(4).itertuples(index=False)]


@no_mathtext()
def write_trajectory_page(table: pd.DataFrame, dated: pd.DataFrame, meta: dict, path: Path, figures_dir: Path
                          ) -> Path:  # fmt: skip
    """`report.html` of a trajectory (`templates/trajectory.html.j2`, figures inlined) and its figures in
    `figures_dir` (PNG and SVG)."""
    figures_dir.mkdir(parents=True, exist_ok=True)
    command = meta.get("command") or "(not recorded)"
    figures = []
    for stem, caption, fig in (
        ("layer_curves", "Per layer against step (means over the layer's heads)", layer_curves(table)),
        ("head_classes", "Head class of every head at every step", class_map(table)),
    ):
        png = figure_png(fig)
        (figures_dir / f"{stem}.png").write_bytes(png)
        (figures_dir / f"{stem}.svg").write_bytes(figure_svg(fig))
        figures.append(png_figure(png, f"{caption}. Command: {command}"))
    summary = step_summary(table)
    step_header = headers(list(summary.columns), terms=TRAJECTORY_TERMS)
    emergence_header = headers(list(dated.columns), terms=TRAJECTORY_TERMS)
    probe, config = meta.get("probe", {}), meta["config"]
    steps = sorted(table["step"].unique())
    return write_page(
        path, "trajectory.html.j2",
        model=str(meta.get("model", {}).get("name", "?")), steps=len(steps), first=int(steps[0]),
        last=int(steps[-1]), windows=probe.get("windows", "?"), corpus=probe.get("source", "?"),
        seq_len=probe.get("seq_len", "?"), probe_sha=str(probe.get("sha256", "?"))[:12], epsilon=config["epsilon"],
        diagonal=config["diagonal"], command=command, figures=figures,
        step_header=step_header, step_rows=_rows(summary),
        emergence_header=emergence_header, emergence_rows=_rows(dated),
        terms=definitions(step_header, emergence_header),
    )  # fmt: skip

