"""The cost sweep's figures (SPEC §6), drawn from its rows (`cost.parquet`): cost vs T on log-log axes, the
diagonal/sink cost ratio, and a regime map (which pattern is cheaper, or feasible at all)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.plots import no_mathtext, plain_text


def with_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the grouping columns of the figures and of the exponent fits (`pipelines.cost_sweep.fit_exponents`).

    margin: delta when the sweep was in delta (κ then varies with T), else kappa. dim: d, except 0 for the
    orthonormal family whose d = T+1 follows T. layer: -1 for synthetic families.
    """
    return frame.assign(
        margin=frame["delta"].where(frame["delta"].notna(), frame["kappa"]).round(12),
        dim=frame["d"].where(frame["family"] != "orthonormal", 0),
        layer=frame["layer"].fillna(-1),
    )


# Regime-map categories: (label, colour), indexed by `_regime`.
REGIMES = (
    ("sink cheaper", "#3b75af"),
    ("diagonal cheaper", "#ef8636"),
    ("equal (within 1e-4)", "#f2f2f2"),
    ("only sink feasible", "#a6c8e8"),
    ("only diagonal feasible", "#f7c59f"),
    ("neither feasible", "#bbbbbb"),
)


def _regime(sink: float, diagonal: float) -> int:
    """Index into REGIMES; costs within the solvers' accuracy (1e-4 relative) count as equal."""
    if np.isfinite(sink) and np.isfinite(diagonal):
        if abs(sink - diagonal) <= 1e-4 * max(sink, diagonal):
            return 2
        return 0 if sink < diagonal else 1
    if np.isfinite(sink):
        return 3
    return 4 if np.isfinite(diagonal) else 5


def _paired(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (embedding draw, margin, norm) with columns sink, diagonal, ratio = diagonal/sink."""
    frame = with_keys(frame[frame["status"] != "too_large"])
    keys = ["family", "T", "dim", "layer", "seed", "norm", "causal", "margin"]
    wide = frame.pivot_table(index=keys, columns="pattern", values="cost", aggfunc="first").reset_index()
    if not {"sink", "diagonal"} <= set(wide.columns):
        return wide.iloc[0:0]
    both = np.isfinite(wide["sink"]) & np.isfinite(wide["diagonal"])
    return wide.assign(ratio=(wide["diagonal"] / wide["sink"]).where(both))


@no_mathtext()
def write_figures(frame: pd.DataFrame, directory: Path) -> list[Path]:
    """cost_vs_T.png, ratio.png and regime_map.png (when both patterns were swept) into directory.

    Each figure is a `matplotlib.figure.Figure` built directly: no pyplot state, the caller's backend left alone."""
    directory.mkdir(parents=True, exist_ok=True)
    figures = [("cost_vs_T.png", cost_vs_T_figure(frame))]
    paired = _paired(frame)
    if len(paired):
        figures += [("ratio.png", ratio_figure(paired)), ("regime_map.png", regime_map_figure(paired))]
    for name, fig in figures:
        with plain_text(fig):  # numeric ticks keep mathtext, the figure's own text is literal
            fig.savefig(directory / name, dpi=120)
    return [directory / name for name, _ in figures]


def _first_margin(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the sweep's first margin (figures show one margin; costs are linear in kappa)."""
    return frame[frame["margin"] == frame["margin"].iloc[0]] if len(frame) else frame


def _plain_log_ticks(ax, Ts: list, log_y: bool = False) -> None:
    """Log axes labelled with plain numbers: x ticks at the swept T values; y (when log) at the powers of ten and
    their 2 and 5 multiples, written 0.2, 0.5, 1, 2, 5, 10 instead of matplotlib's 2×10⁰."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def minor(value: float, _position) -> str:
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return f"{value:g}" if min(abs(mantissa - 2), abs(mantissa - 5)) < 1e-6 else ""

    ax.set_xticks(Ts, [str(int(T)) for T in Ts])
    ax.xaxis.set_minor_formatter(NullFormatter())
    if log_y:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def cost_vs_T_figure(frame: pd.DataFrame) -> Figure:
    """Log-log median cost vs T per family (its largest d; layers pooled by median), exponents in the legend."""
    frame = _first_margin(with_keys(frame[np.isfinite(frame["cost"])]))
    families = list(dict.fromkeys(frame["family"]))
    fig = Figure(figsize=(4.5 * max(len(families), 1), 3.8))
    axes = fig.subplots(1, max(len(families), 1), squeeze=False)
    for ax, family in zip(axes[0], families):
        sub = frame[frame["family"] == family]
        sub = sub[sub["dim"] == sub["dim"].max()]
        for (pattern, norm), group in sub.groupby(["pattern", "norm"]):
            curve = group.groupby("T")["cost"].median()
            slope = np.polyfit(np.log(curve.index), np.log(curve.values), 1)[0] if len(curve) >= 2 else math.nan
            style = "-" if norm == "nuclear" else "--"
            ax.plot(curve.index, curve.values, style, marker="o", label=f"{pattern} {norm}: T^{slope:.2f}")
        ax.set(xscale="log", yscale="log", xlabel="T (contexts)", ylabel="cost ‖W_QK‖",
               title=f"{family} (d={sub['dim'].max()})" if family != "orthonormal" else family)
        _plain_log_ticks(ax, sorted(sub["T"].unique()), log_y=True)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def ratio_figure(paired: pd.DataFrame) -> Figure:
    """Median diagonal/sink cost ratio vs T per family and norm (largest d); above 1 the sink is cheaper."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    finite = _first_margin(paired[np.isfinite(paired["ratio"])])
    for (family, norm), group in finite.groupby(["family", "norm"]):
        group = group[group["dim"] == group["dim"].max()]
        curve = group.groupby("T")["ratio"].median()
        ax.plot(curve.index, curve.values, "-" if norm == "nuclear" else "--", marker="o", label=f"{family} {norm}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel="T (contexts)", ylabel="diagonal cost / sink cost", title="diagonal / sink")
    _plain_log_ticks(ax, sorted(finite["T"].unique()))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def regime_map_figure(paired: pd.DataFrame) -> Figure:
    """Per family and norm: a (d or layer) × T grid shaded by the majority regime over seeds, median ratio printed."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    paired = _first_margin(paired)
    panels = list(paired.groupby(["family", "norm"]))
    fig = Figure(figsize=(4.2 * len(panels), 3.8))
    axes = fig.subplots(1, len(panels), squeeze=False)
    cmap = ListedColormap([colour for _, colour in REGIMES])
    for ax, ((family, norm), group) in zip(axes[0], panels):
        rows_key = "layer" if family.startswith("model:") else "dim"
        ys, Ts = sorted(group[rows_key].unique()), sorted(group["T"].unique())
        grid = np.full((len(ys), len(Ts)), len(REGIMES) - 1)
        for (y, T), cell in group.groupby([rows_key, "T"]):
            regimes = [_regime(s, g) for s, g in zip(cell["sink"], cell["diagonal"])]
            grid[ys.index(y), Ts.index(T)] = np.bincount(regimes, minlength=len(REGIMES)).argmax()
            ratio = cell["ratio"][np.isfinite(cell["ratio"])].median()
            if np.isfinite(ratio):
                ax.text(Ts.index(T), ys.index(y), f"{ratio:.2g}", ha="center", va="center", fontsize=7)
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(REGIMES) - 0.5, origin="lower", aspect="auto")
        ylabels = ["T+1" if rows_key == "dim" and y == 0 else y for y in ys]
        ax.set(xticks=range(len(Ts)), xticklabels=Ts, yticks=range(len(ys)), yticklabels=ylabels,
               xlabel="T (contexts)", ylabel="layer" if rows_key == "layer" else "d",
               title=f"{family}, {norm}\n(numbers: diagonal/sink)")
    fig.legend(handles=[Patch(color=c, label=label) for label, c in REGIMES], loc="lower center", ncol=3,
               fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig
