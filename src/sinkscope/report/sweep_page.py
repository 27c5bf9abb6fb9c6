"""Figures and page of a sink-rate sweep (`sinkscope sweep`): sink rate against ε and against T per model, one
line per corpus, so natural text, random tokens and repeated tokens sit side by side (Gu et al. 2025's shapes).

A sweep of one T has no T figure (it would be one dot per corpus): the page says so instead. Figures are written
to `figures/` as PNG and SVG; the table's header cells carry their definitions (`glossary`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.glossary import definitions, headers
from sinkscope.report.page import cell_text, png_figure, write_page
from sinkscope.report.plots import figure_png, figure_svg, no_mathtext


def _panels(models: list[str]) -> tuple[Figure, list]:
    fig = Figure(figsize=(4.2 * len(models), 3.2))
    axes = fig.subplots(1, len(models), squeeze=False, sharey=True)
    for ax, model in zip(axes[0], models):
        ax.set_title(model, fontsize=10)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("sink rate (per-window ε)")
    return fig, list(axes[0])


def _legend_below(fig: Figure, ax) -> None:
    """One legend for all panels, under them (beside them, a long corpus path squeezed the panels away)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False,
               ncol=max(1, min(3, len(labels))))  # fmt: skip


def sink_rate_vs_epsilon(table: pd.DataFrame) -> Figure:
    """Per model: sink rate against ε, a colour per corpus and a line style per T."""
    models, corpora = list(dict.fromkeys(table["model"])), list(dict.fromkeys(table["corpus"]))
    lengths = sorted(table["seq_len"].unique())
    styles = ["-", "--", ":", "-."]
    fig, axes = _panels(models)
    for ax, model in zip(axes, models):
        for c, corpus in enumerate(corpora):
            for i, seq_len in enumerate(lengths):
                part = table[(table["model"] == model) & (table["corpus"] == corpus) & (table["seq_len"] == seq_len)]
                part = part.sort_values("epsilon")
                ax.plot(part["epsilon"], part["sink_rate"], styles[i % len(styles)], marker=".", color=f"C{c}",
                        label=f"{corpus}, T={seq_len}")  # fmt: skip
        ax.set_xlabel("ε")
    fig.tight_layout()
    _legend_below(fig, axes[0])
    return fig


def sink_rate_vs_seq_len(table: pd.DataFrame, epsilon: float) -> Figure:
    """Per model: sink rate at one ε against the window length T (log scale), a line per corpus."""
    part = table[table["epsilon"] == epsilon]
    models, corpora = list(dict.fromkeys(part["model"])), list(dict.fromkeys(part["corpus"]))
    fig, axes = _panels(models)
    for ax, model in zip(axes, models):
        for c, corpus in enumerate(corpora):
            line = part[(part["model"] == model) & (part["corpus"] == corpus)].sort_values("seq_len")
            ax.plot(line["seq_len"], line["sink_rate"], marker="o", color=f"C{c}", label=corpus)
        ax.set_xscale("log", base=2)
        lengths = sorted(part["seq_len"].unique())
        ax.set_xticks(lengths, [str(t) for t in lengths])
        ax.minorticks_off()
        ax.set_xlabel(f"window length T (ε = {epsilon})")
    fig.tight_layout()
    _legend_below(fig, axes[0])
    return fig


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the page shows it: without the cell folder, rates and scores to 4 decimals, seconds to 1."""
    shown = table.drop(columns=["cell"]).round(4)
    if "analyze_seconds" in shown.columns:
        shown["analyze_seconds"] = shown["analyze_seconds"].round(1)
    return shown


@no_mathtext()
def write_sweep_report(table: pd.DataFrame, path: Path, figures_dir: Path, epsilon: float) -> Path:
    """`report.html` of a sweep (`templates/sweep.html.j2`: figures inlined, the tidy table below) and its figures
    in `figures_dir` (PNG and SVG)."""
    figures_dir.mkdir(parents=True, exist_ok=True)
    drawn = [("sink_rate_vs_epsilon", "Sink rate (Gu et al.: threshold per window) against ε", sink_rate_vs_epsilon(table))]
    single_length = table["seq_len"].nunique() < 2
    if not single_length:
        drawn.append(("sink_rate_vs_seq_len", f"Sink rate at ε = {epsilon} against the window length T",
                      sink_rate_vs_seq_len(table, epsilon)))  # fmt: skip
    figures = []
    for stem, caption, fig in drawn:
        png = figure_png(fig)
        (figures_dir / f"{stem}.png").write_bytes(png)
        (figures_dir / f"{stem}.svg").write_bytes(figure_svg(fig))
        figures.append(png_figure(png, caption))
    shown = shown_table(table)
    header = headers([str(column) for column in shown.columns])
    return write_page(
        path, "sweep.html.j2",
        models=", ".join(dict.fromkeys(table["model"].map(str))),
        figures=figures,
        single_length=int(table["seq_len"].iloc[0]) if single_length else None,
        header=header,
        rows=[[cell_text(value) for value in row] for row in shown.itertuples(index=False)],
        terms=definitions(header),
    )  # fmt: skip
