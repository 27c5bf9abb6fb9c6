"""The comparison page of several runs (`sinkscope report A B C`): what differs between them, on one screen.

`comparison` builds the data the `comparison` block of `templates/report.html.j2` draws:

- a summary table, one row per run, with each run's difference from the first (Δ columns);
- per-layer sink rate, diagonal score (mean over the layer's heads) and BOS cosine (mean cos(z₀, zₜ)) of every run
  against relative depth `layer / (L - 1)`, so models of different depth share one axis;
- head-class counts side by side (a table of counts and shares, and a grouped bar chart of shares);
- where runs share a model (same name, weights and L × H), a per-head difference heatmap of the sink and diagonal
  scores against the first run of that model, on a symmetric colour scale set by the largest difference;
- the top secondary-sink tokens of each run (`tokens_section.top_sink_tokens`).

Runs are named by the last part of their directory that tells them apart (`short_names`), never by a full path.
"""

from __future__ import annotations

from pathlib import PurePath

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.glossary import headers
from sinkscope.report.page import cell_text, png_figure
from sinkscope.report.plots import HEAD_CLASS_COLORS, figure_png, layer_ticks, legend_below, series_styles
from sinkscope.report.tokens_section import top_sink_tokens

TOP_TOKENS = 5  # secondary-sink tokens listed per run
MAX_DIFFERENCE_FIGURES = 6  # pairs of runs of one model drawn as per-head differences
SUMMARY_COLUMNS = ("run", "model", "corpus", "T", "windows", "sink rate", "Δ sink rate", "of mean", "mean sink",
                   "Δ mean sink", "mean diag", "Δ mean diag", "MLP-like", "tokens/s")  # fmt: skip


def short_names(runs: list) -> list[str]:
    """One short, distinct name per run: the fewest trailing parts of its directory that differ from every other
    run's ("runs/a/prose", "runs/b/prose" → "a/prose", "b/prose"); `model · corpus` for a run not read from a
    directory (`fallback_name`); a number in front where even full paths collide."""
    paths = [PurePath(str(run.meta["directory"])).parts if run.meta.get("directory") else None for run in runs]
    longest = max((len(p) for p in paths if p), default=1)
    for depth in range(1, longest + 1):
        names = [str(PurePath(*p[-depth:])) if p else fallback_name(run) for p, run in zip(paths, runs)]
        if len(set(names)) == len(names):
            return names
    return [f"{i + 1}: {name}" for i, name in enumerate(names)]


def fallback_name(run) -> str:
    """A run not read from a directory: 'model · corpus', the corpus by its file name (not a long path)."""
    return f"{run.meta['model'].get('name', '?')} · {corpus_name(run.meta['corpus'].get('source'))}"


def model_key(run) -> tuple:
    """What makes two runs the same model: its name, its weights (sha256 or path, when recorded) and L × H."""
    model = run.meta["model"]
    return model.get("name"), model.get("sha256") or model.get("path"), len(run.layers), run.heads["head"].nunique()


def _delta(value: float, first: float, index: int) -> str:
    """The difference from the first run, signed, to 3 decimals ("0.000" when it rounds to zero: no "-0.000")."""
    if index == 0:
        return "–"
    text = f"{value - first:+.3f}"
    return "0.000" if float(text) == 0 else text


def corpus_name(source: object) -> str:
    """A corpus as the table shows it: a file or directory by its name (the row's hover gives the run's path)."""
    text = cell_text(source)
    return text if text.startswith(("builtin:", "hf:")) else PurePath(text).name or text


def summary_table(runs: list, names: list[str]) -> dict:
    """Header cells (with definitions), one row of cell texts per run, each row's full directory (hover), and the
    ε note: the ε every run thresholds at, or a warning that their sink rates used different ε."""
    first = runs[0].meta["summary"]
    rows = []
    for index, (run, name) in enumerate(zip(runs, names)):
        meta, s = run.meta, run.meta["summary"]
        of_mean, speed = s.get("sink_rate_of_mean"), meta.get("timings", {}).get("tokens_per_second")
        rows.append([
            name, cell_text(meta["model"].get("name")), corpus_name(meta["corpus"].get("source")),
            cell_text(meta["corpus"].get("seq_len")), cell_text(meta["corpus"].get("windows")),
            f"{s['sink_rate']:.3f}", _delta(s["sink_rate"], first["sink_rate"], index),
            cell_text(None if of_mean is None else f"{of_mean:.3f}"),
            f"{s['mean_sink_score']:.3f}", _delta(s["mean_sink_score"], first["mean_sink_score"], index),
            f"{s['mean_diag_score']:.3f}", _delta(s["mean_diag_score"], first["mean_diag_score"], index),
            f"{run.layers['mlp_like_frac'].mean():.3f}", cell_text(None if speed is None else f"{speed:.0f}"),
        ])  # fmt: skip
    titles = [str(run.meta.get("directory") or run.name) for run in runs]
    epsilons = sorted({run.meta["summary"]["epsilon"] for run in runs})
    note = (f"Sink rates at ε = {epsilons[0]} for every run." if len(epsilons) == 1 else
            "The runs threshold at different ε (" + ", ".join(map(str, epsilons)) + "): their sink rates differ by "
            "definition, not only by model or corpus.")  # fmt: skip
    return {"header": headers(SUMMARY_COLUMNS), "rows": rows, "titles": titles, "epsilon_note": note,
            "classes": ["text", None, None] + ["num"] * (len(SUMMARY_COLUMNS) - 3)}  # fmt: skip


def relative_depth(layers: pd.DataFrame) -> pd.Series:
    """`layer / (L - 1)`: 0 the first layer, 1 the last (0 for a one-layer model)."""
    return layers["layer"] / max(1, len(layers) - 1)


def depth_figure(named: list[tuple[str, pd.DataFrame, pd.DataFrame]]) -> Figure:
    """(name, layers, heads) per run → sink rate, mean diagonal score and mean BOS cosine against relative depth,
    one line per run (colour and dash distinct for any number of runs), the legend below the panels."""
    fig = Figure(figsize=(11, 3.6))
    axes = fig.subplots(1, 3)
    panels = (("sink rate (per-window, ε)", None), ("diagonal score, mean over heads", None),
              ("mean cos(z₀, zₜ), t ≥ 1", 0.0))  # fmt: skip
    for (name, layers, heads), style in zip(named, series_styles(len(named))):
        depth = relative_depth(layers)
        diag = heads.groupby("layer")["diag_score"].mean().reindex(layers["layer"]).to_numpy()
        for ax, values in zip(axes, (layers["sink_rate"], diag, layers["bos_cos_mean_z"])):
            ax.plot(depth, values, marker=".", label=name, **style)
    for ax, (label, zero) in zip(axes, panels):
        ax.set_xlabel("relative depth: layer / (L − 1)")
        ax.set_ylabel(label)
        ax.set_xlim(-0.03, 1.03)
        if zero is not None:
            ax.axhline(zero, color="black", lw=0.6)
    axes[0].set_ylim(-0.02, 1.02)  # a rate: its whole range, so a flat 0 does not look like a signal
    axes[1].set_ylim(bottom=0)
    axes[0].set_title("sink rate", fontsize=10)
    axes[1].set_title("diagonal score", fontsize=10)
    axes[2].set_title("BOS cosine (attention input)", fontsize=10)
    fig.tight_layout()
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(4, len(named)), frameon=False)  # below all panels, so it never hides a curve
    return fig


def class_counts(runs: list, names: list[str]) -> pd.DataFrame:
    """Heads per class (rows, in the report's class order) and run (columns)."""
    counts = pd.DataFrame({name: run.heads["head_class"].value_counts() for run, name in zip(runs, names)})
    order = [c for c in HEAD_CLASS_COLORS if c in counts.index] + [c for c in counts.index if c not in HEAD_CLASS_COLORS]
    return counts.reindex(order).fillna(0).astype(int)


def classes_figure(counts: pd.DataFrame) -> Figure:
    """Share of heads per class, one bar per run within each class."""
    shares = counts / counts.sum()
    n_runs = shares.shape[1]
    fig = Figure(figsize=(max(5.0, min(8.0, 2.0 + 0.45 * len(shares) * n_runs)), 3.2))
    ax = fig.subplots()
    width = 0.8 / n_runs
    x = np.arange(len(shares))
    for i, (name, style) in enumerate(zip(shares.columns, series_styles(n_runs))):
        ax.bar(x + (i - (n_runs - 1) / 2) * width, shares[name], width, color=style["color"], label=name)
    ax.set_xticks(x, list(shares.index))
    ax.set_ylabel("share of the run's heads")
    ax.set_xlabel("head class (thresholds in docs/statistics.md)")
    ax.set_ylim(0, 1)
    legend_below(ax, n_runs, columns=4)
    fig.tight_layout()
    return fig


def classes_table(counts: pd.DataFrame) -> dict:
    """Counts and shares per class (rows) and run (columns); a run's header cell is defined in place and links to
    the summary table."""
    totals = counts.sum()
    rows = [[name, *(f"{counts.loc[name, run]} ({counts.loc[name, run] / totals[run]:.0%})" for run in counts.columns)]
            for name in counts.index]  # fmt: skip
    runs = [{"text": run, "key": run, "anchor": "summary", "section": "docs/statistics.md § heads.parquet",
             "definition": f"heads of run {run} in each class: count (share of its {totals[run]} heads)"}
            for run in counts.columns]  # fmt: skip
    return {"header": headers(["class"]) + runs, "rows": rows}


def difference_figure(reference: pd.DataFrame, other: pd.DataFrame, title: str) -> Figure:
    """Per-head `other − reference` of the sink and the diagonal score (layer × head), each on a diverging colour
    scale symmetric about 0 whose end is the largest |difference| (so a small difference is not drawn white)."""
    fig = Figure(figsize=(3.2 + 0.7 * reference["head"].nunique(), 1.6 + 0.12 * reference["layer"].nunique()),
                 layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, column, label in zip(axes, ("sink_score", "diag_score"), ("Δ sink score", "Δ diagonal score")):
        grid = (other.pivot(index="layer", columns="head", values=column)
                - reference.pivot(index="layer", columns="head", values=column)).to_numpy(dtype=float)  # fmt: skip
        limit = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 0.0
        limit = max(limit, 1e-6)
        image = ax.imshow(grid, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"{label}\n{title}", fontsize=9)  # the pair in each panel: no suptitle under the stamp
        layer_ticks(ax, "x")
        layer_ticks(ax, "y")
        fig.colorbar(image, ax=ax, fraction=0.08, label=label)
    return fig


def difference_figures(runs: list, names: list[str]) -> list[dict]:
    """For every run whose model an earlier run shares: its per-head differences from the first run of that
    model (at most `MAX_DIFFERENCE_FIGURES`)."""
    first_of: dict[tuple, int] = {}
    figures = []
    for index, run in enumerate(runs):
        key = model_key(run)
        if key not in first_of:
            first_of[key] = index
            continue
        if len(figures) == MAX_DIFFERENCE_FIGURES:
            break
        ref = first_of[key]
        title = f"{names[index]} − {names[ref]}"
        fig = difference_figure(runs[ref].heads, run.heads, title)
        figures.append(png_figure(figure_png(fig), f"Per-head difference: {title} ({run.meta['model'].get('name')})"))
    return figures


def secondary_sinks(runs: list, names: list[str]) -> dict:
    """Per run, its top `TOP_TOKENS` non-BOS sink tokens as "'tok' sink_frac (n)", or why there are none."""
    rows = []
    for run, name in zip(runs, names):
        tokens = run.extra.get("tokens")
        if tokens is None or tokens.empty:
            rows.append([name, "no key-token table in this run"])
            continue
        top = top_sink_tokens(tokens, run.meta["corpus"].get("bos_id"), top=TOP_TOKENS)
        listed = ", ".join(f"{row.token!r} {row.sink_frac:.3f} ({row.n})" for row in top.itertuples())
        rows.append([name, listed or "no token other than BOS occurs 20 times or more"])
    return {"header": headers(["run", "top secondary sinks"]), "rows": rows}


def comparison(runs: list, names: list[str]) -> dict:
    """Everything the comparison block of the page shows (see the module docstring)."""
    counts = class_counts(runs, names)
    named = [(name, run.layers, run.heads) for run, name in zip(runs, names)]
    depth = png_figure(figure_png(depth_figure(named)),
                       "Sink rate, diagonal score and BOS cosine per layer against relative depth")  # fmt: skip
    differences = difference_figures(runs, names)
    return {
        "summary": summary_table(runs, names),
        "depth": depth,
        "classes": {"table": classes_table(counts),
                    "figure": png_figure(figure_png(classes_figure(counts)), "Head classes: share of each run's heads")},
        "differences": differences,
        "shared_models": bool(differences),
        "sinks": secondary_sinks(runs, names),
    }  # fmt: skip
