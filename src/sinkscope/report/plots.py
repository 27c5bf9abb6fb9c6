"""Figures of a run: heatmaps of head statistics, BOS geometry by depth, positional sinks.

Each function takes the run's tables and returns a `matplotlib.figure.Figure` built directly (no pyplot state, no
backend switch at import: the caller's matplotlib setup is left alone); `figure_png` turns one into PNG bytes.
"""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

HEAD_CLASS_COLORS = {
    "sink": "#c0392b",
    "diagonal": "#2471a3",
    "previous-token": "#28b463",
    "dense": "#b7950b",
    "mixed": "#909497",
}


# What every figure drawn inside `labelled(...)` says it shows (model, corpus, T), stamped above it by figure_png.
FIGURE_LABEL: ContextVar[str | None] = ContextVar("FIGURE_LABEL", default=None)
logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # "findfont" lines are not for users


@contextmanager
def labelled(text: str) -> Iterator[None]:
    """Stamp `text` (e.g. "SmolLM2 · builtin:prose · T=64") on every figure turned into PNG inside the block."""
    token = FIGURE_LABEL.set(text)
    try:
        yield
    finally:
        FIGURE_LABEL.reset(token)


def has_columns(frame: pd.DataFrame | None, *columns: str) -> bool:
    """Whether a table exists, is not empty and has all `columns` (report sections skip panels otherwise)."""
    return frame is not None and not frame.empty and all(c in frame.columns for c in columns)


def figure_png(fig: Figure) -> bytes:
    """PNG bytes of `fig`, stamped with the current `labelled` text; matplotlib's warnings (a glyph missing from
    the font, e.g. CJK in a token) stay out of the terminal, the glyph is drawn as a box."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        label = FIGURE_LABEL.get()
        if label:
            _stamp(fig, label)
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _stamp(fig: Figure, label: str) -> None:
    """Write `label` just above everything drawn in `fig` (titles included), centred on it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    box = fig.get_tightbbox(canvas.get_renderer())  # inches
    x, y = (box.x0 + box.x1) / 2 / fig.get_figwidth(), box.y1 / fig.get_figheight()
    fig.text(x, y + 0.02 / fig.get_figheight(), label, ha="center", va="bottom", fontsize=8, color="#566573")


def series_styles(n: int) -> list[dict]:
    """Colour and line style for `n` series, no two alike: tab10, then tab20, then a sampled colormap with
    alternating dash patterns."""
    if n <= 10:
        colors = [matplotlib.colormaps["tab10"](i) for i in range(n)]
    elif n <= 20:
        colors = [matplotlib.colormaps["tab20"](i) for i in range(n)]
    else:
        colors = [matplotlib.colormaps["turbo"](x) for x in np.linspace(0.05, 0.95, n)]
    dashes = ["-", "--", ":", "-."]
    return [{"color": c, "linestyle": dashes[(i // 10) % 4] if n > 10 else "-"} for i, c in enumerate(colors)]


def head_heatmap(heads: pd.DataFrame, column: str, title: str, cmap: str = "magma") -> Figure:
    """Layer × head heatmap of one per-head column, values in [0, 1]."""
    grid = heads.pivot(index="layer", columns="head", values=column).to_numpy()
    fig = Figure(figsize=(1.2 + 0.35 * grid.shape[1], 1.0 + 0.18 * grid.shape[0]))
    ax = fig.subplots()
    image = ax.imshow(grid, aspect="auto", cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.08, label=title)
    return fig


def bos_geometry(layers: pd.DataFrame) -> Figure:
    """BOS cosine across depth for the attention input z and the residual h, and the BOS norm ratio."""
    fig = Figure(figsize=(9, 3.2))
    left, right = fig.subplots(1, 2)
    for kind, style in (("z", "-"), ("h", "--")):
        left.plot(layers["layer"], layers[f"bos_cos_mean_{kind}"], style, color="#2471a3", label=f"mean cos ({kind})")
        left.plot(layers["layer"], layers[f"bos_cos_max_{kind}"], style, color="#c0392b", label=f"max cos ({kind})")
    left.axhline(0, color="black", lw=0.6)
    left.set_xlabel("layer")
    left.set_ylabel("cos(x₀, xₜ), t ≥ 1")
    left.set_title("BOS cosine with other tokens", fontsize=10)
    left.legend(fontsize=7)
    for kind, style in (("h", "-"), ("z", "--")):
        right.plot(layers["layer"], layers[f"bos_norm_ratio_{kind}"], style, label=kind)
    right.set_yscale("log")
    right.set_xlabel("layer")
    right.set_ylabel("‖x₀‖ / mean ‖xₜ‖")
    right.set_title("BOS norm ratio (massive activation)", fontsize=10)
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def position_sinks(positions: pd.DataFrame) -> Figure:
    """Per-position sink rate (fraction of heads with α_k > ε), averaged over layers, and by layer."""
    fig = Figure(figsize=(9, 3.2))
    left, right = fig.subplots(1, 2)
    mean = positions.groupby("position")["sink_rate"].mean()
    left.plot(mean.index, mean.values, marker=".", ms=3)
    left.set_xscale("symlog", linthresh=1)
    left.set_xlabel("key position k")
    left.set_ylabel("sink rate")
    left.set_title("Per-position sink rate (all layers)", fontsize=10)
    grid = positions.pivot(index="layer", columns="position", values="mean_key_score").to_numpy()
    image = right.imshow(np.clip(grid, 1e-4, 1), aspect="auto", cmap="viridis", norm=matplotlib.colors.LogNorm())
    right.set_xlabel("key position k")
    right.set_ylabel("layer")
    right.set_title("mean α_k over heads", fontsize=10)
    fig.colorbar(image, ax=right, fraction=0.08, label="mean key score α_k (log scale)")
    fig.tight_layout()
    return fig


def head_classes(heads: pd.DataFrame) -> Figure:
    """Head classes per layer, stacked."""
    counts = heads.groupby(["layer", "head_class"]).size().unstack(fill_value=0)
    fig = Figure(figsize=(9, 2.8))
    ax = fig.subplots()
    bottom = np.zeros(len(counts))
    for name, color in HEAD_CLASS_COLORS.items():
        if name in counts:
            ax.bar(counts.index, counts[name], bottom=bottom, color=color, label=name)
            bottom += counts[name].to_numpy()
    ax.set_xlabel("layer")
    ax.set_ylabel("heads")
    ax.set_title("Head classes per layer", fontsize=10)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return fig


def compare_runs(named_layers: list[tuple[str, pd.DataFrame]]) -> Figure:
    """Several runs side by side against relative depth: sink rate and BOS cosine (z)."""
    fig = Figure(figsize=(9, 3.2))
    left, right = fig.subplots(1, 2)
    for (name, layers), style in zip(named_layers, series_styles(len(named_layers))):
        depth = layers["layer"] / max(1, len(layers) - 1)
        left.plot(depth, layers["sink_rate"], marker=".", label=name, **style)
        right.plot(depth, layers["bos_cos_mean_z"], marker=".", label=name, **style)
    left.set_xlabel("relative depth")
    left.set_ylabel("sink rate")
    right.set_xlabel("relative depth")
    right.set_ylabel("mean cos(z₀, zₜ)")
    right.axhline(0, color="black", lw=0.6)
    fig.tight_layout()
    fig.legend(*left.get_legend_handles_labels(), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(3, len(named_layers)))  # below both panels, so it never hides a curve
    return fig
