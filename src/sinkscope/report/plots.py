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
import matplotlib.text
import matplotlib.ticker
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

HEAD_CLASS_COLORS = {
    "learned sink": "#6c3483",  # models with a learned sink column (gpt-oss)
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
    return _save(fig, "png")


def figure_svg(fig: Figure) -> bytes:
    """SVG bytes of `fig` (vector, for a paper; heatmaps stay raster inside it), stamped as `figure_png` stamps,
    without a date so the same run gives the same file."""
    return _save(fig, "svg")


@contextmanager
def no_mathtext() -> Iterator[None]:
    """Figures built inside the block (or the decorated function) create every text as written, never as mathtext
    (`text.parse_math` off, the caller's setting restored after), so a layout step that measures a title or legend
    holding a model, corpus or run name such as `price_$5_$.txt` or `a$b$c` never parses it. Saving goes through
    `plain_text`, which keeps those texts literal and gives numeric tick labels their mathtext back. Used on every
    entry point that draws (report pages, sweep, cost, train-bb, ablate, reproduce)."""
    with matplotlib.rc_context({"text.parse_math": False}):
        yield


# matplotlib's number formatters, whose labels may be mathtext (10², ×10³); every other formatter's labels (fixed
# lists, categories, functions) are text the code was given, such as names and tokens.
_NUMBER_FORMATTERS = (matplotlib.ticker.ScalarFormatter, matplotlib.ticker.LogFormatter,
                      matplotlib.ticker.LogitFormatter, matplotlib.ticker.EngFormatter,
                      matplotlib.ticker.PercentFormatter)


def _literal_texts(fig: Figure) -> None:
    """Mark every text of `fig` as drawn as written (titles, axis labels, legends, annotations, tick labels of text),
    except the labels of numeric ticks and offsets, which keep mathtext (a log axis reads 10², not
    `$\\mathdefault{10^{2}}$`). The tick objects of a text axis are created here for every location it has, so
    none is created later with mathtext on."""
    numeric = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for ticks, formatter, locations in (
                (axis.get_major_ticks, axis.get_major_formatter(), axis.get_majorticklocs()),
                (axis.get_minor_ticks, axis.get_minor_formatter(), axis.get_minorticklocs()),
            ):
                made = ticks(len(locations))
                if isinstance(formatter, _NUMBER_FORMATTERS):
                    numeric |= {id(t) for tick in made for t in (tick.label1, tick.label2)}
            numeric.add(id(axis.offsetText))
    for text in fig.findobj(matplotlib.text.Text):
        text.set_parse_math(id(text) in numeric)


@contextmanager
def plain_text(fig: Figure) -> Iterator[None]:
    """Inside the block `fig` draws user text as written, never parsed as mathtext (`_literal_texts`): a corpus
    `price_$5_$.txt` or a model `a$b$c` in a title, legend or tick label shows literally instead of crashing the
    figure or turning into math, while numeric ticks drawn now (a log axis's 10²) keep mathtext. Every figure
    sinkscope saves goes through here."""
    with matplotlib.rc_context({"text.parse_math": True}):
        _literal_texts(fig)
        yield


def _save(fig: Figure, kind: str) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), plain_text(fig):
        warnings.simplefilter("ignore")
        label = FIGURE_LABEL.get()
        if label and getattr(fig, "_sinkscope_stamp", None) != label:  # stamp once, however often saved
            if fig.get_layout_engine() is not None:  # lay out first (constrained): the stamp goes above the result
                fig.draw_without_rendering()
            _stamp(fig, label)
            fig._sinkscope_stamp = label
        metadata = {"Date": None} if kind == "svg" else None
        fig.savefig(buffer, format=kind, dpi=110, bbox_inches="tight", metadata=metadata)
    return buffer.getvalue()


def layer_ticks(ax, axis: str = "x") -> None:
    """Integer ticks only on a layer axis (matplotlib's default locator puts 2.5, 7.5, … on 18 layers)."""
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))


def layer_range(ax, layers, axis: str = "x") -> None:
    """A bar chart's layer axis over exactly its layers, 0 … L−1 (bars ±0.5 around each; matplotlib's margins
    would run a ticked axis of 18 layers on to 18), with integer ticks."""
    low, high = float(np.min(layers)) - 0.5, float(np.max(layers)) + 0.5
    (ax.set_xlim if axis == "x" else ax.set_ylim)(low, high)
    layer_ticks(ax, axis)


def position_axis(ax, n_positions: int) -> None:
    """A symlog key-position axis (linear up to 1) ticked at 0, 1, 2, 4, 8, … < `n_positions`, written as plain
    integers (matplotlib's symlog labels read "0, 10⁰, 10¹")."""
    powers = [2**i for i in range(int(np.log2(max(n_positions - 1, 1))) + 1) if 2**i < n_positions]
    ticks = [0] + (powers if len(powers) <= 8 else powers[::2])  # at most 8 powers: every other one beyond
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def legend_below(ax, n_entries: int, columns: int = 3) -> None:
    """The axes' legend under its x label, outside the data (a legend inside can cover a curve)."""
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=max(1, min(columns, n_entries)),
              frameon=False)  # fmt: skip


def _stamp(fig: Figure, label: str) -> None:
    """Write `label` just above everything drawn in `fig` (titles included), centred on it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    box = fig.get_tightbbox(canvas.get_renderer())  # inches
    x, y = (box.x0 + box.x1) / 2 / fig.get_figwidth(), box.y1 / fig.get_figheight()
    fig.text(x, y + 0.02 / fig.get_figheight(), label, ha="center", va="bottom", fontsize=8, color="#566573",
             parse_math=False)  # the settings line names the model and corpus


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
    layer_ticks(ax, "x")
    layer_ticks(ax, "y")
    fig.colorbar(image, ax=ax, fraction=0.08, label=title)
    return fig


def bos_geometry(layers: pd.DataFrame) -> Figure:
    """BOS cosine across depth for the attention input z and the residual h (mean, max, and the share of tokens
    at cos ≤ 0 when the run has it), and the BOS norm ratio; legends below the panels, off the curves."""
    fig = Figure(figsize=(9, 3.6))
    left, right = fig.subplots(1, 2)
    for kind, style in (("z", "-"), ("h", "--")):
        left.plot(layers["layer"], layers[f"bos_cos_mean_{kind}"], style, color="#2471a3", label=f"mean cos ({kind})")
        left.plot(layers["layer"], layers[f"bos_cos_max_{kind}"], style, color="#c0392b", label=f"max cos ({kind})")
        if f"bos_cos_nonpos_frac_{kind}" in layers.columns:
            left.plot(layers["layer"], layers[f"bos_cos_nonpos_frac_{kind}"], style, color="#7d3c98",
                      label=f"share cos ≤ 0 ({kind})")  # fmt: skip
    left.axhline(0, color="black", lw=0.6)
    left.set_xlabel("layer")
    left.set_ylabel("cos(x₀, xₜ), t ≥ 1 / share")
    left.set_title("BOS cosine with other tokens", fontsize=10)
    legend_below(left, len(left.get_lines()) - 1)
    for kind, style in (("h", "-"), ("z", "--")):
        right.plot(layers["layer"], layers[f"bos_norm_ratio_{kind}"], style, color="#2471a3" if kind == "h" else "#c0392b",
                   label=f"x = {kind}")  # fmt: skip
    right.set_yscale("log")
    right.set_xlabel("layer")
    right.set_ylabel("‖x₀‖ / mean ‖xₜ‖")
    right.set_title("BOS norm ratio (massive activation)", fontsize=10)
    legend_below(right, 2)
    for ax in (left, right):
        layer_ticks(ax)
    fig.tight_layout()
    return fig


def position_sinks(positions: pd.DataFrame) -> Figure:
    """Per-position sink rate (fraction of heads with α_k > ε), averaged over layers, and by layer."""
    fig = Figure(figsize=(9, 3.2))
    left, right = fig.subplots(1, 2)
    mean = positions.groupby("position")["sink_rate"].mean()
    left.plot(mean.index, mean.values, marker=".", ms=3)
    position_axis(left, int(positions["position"].max()) + 1)
    left.set_xlabel("key position k")
    left.set_ylabel("sink rate")
    left.set_ylim(-0.02, 1.02)
    left.set_title("Per-position sink rate (all layers)", fontsize=10)
    grid = positions.pivot(index="layer", columns="position", values="mean_key_score").to_numpy()
    image = right.imshow(np.clip(grid, 1e-4, 1), aspect="auto", cmap="viridis", norm=matplotlib.colors.LogNorm())
    right.set_xlabel("key position k")
    right.set_ylabel("layer")
    right.set_title("mean α_k over heads", fontsize=10)
    layer_ticks(right, "y")
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
    layer_range(ax, counts.index)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return fig
