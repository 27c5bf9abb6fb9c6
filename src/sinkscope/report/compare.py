"""The comparison page of several runs (`sinkscope report A B C`): what differs between them, on one screen.

`comparison` builds the data the `comparison` block of `templates/report.html.j2` draws:

- a summary table, one row per run, with each run's difference from the first (Δ columns), each Δ with a 95%
  bootstrap interval over windows (`delta_interval`) from the runs' per-window table `windows.parquet`
  (`statistics/window_summary.py`), and a note when the runs differ in windows or T;
- per-layer sink rate, diagonal score (mean over the layer's heads) and BOS cosine (mean cos(z₀, zₜ)) of every run
  against relative depth `layer / (L - 1)`, so models of different depth share one axis;
- head-class counts side by side (a table of counts and shares, and a grouped bar chart of shares);
- where runs share a model (same name, weights and L × H), a per-head difference heatmap of the sink and diagonal
  scores against the first run of that model, on a symmetric colour scale set by the largest difference;
- the top secondary-sink tokens of each run (`tokens_section.top_sink_tokens`).

Runs are named by the last part of their directory that tells them apart (`short_names`), never by a full path.
A figure title wraps a long name to its panel's width and, past two lines, elides its middle (`fit_name`); the
figure's caption and the legends keep it whole.
"""

from __future__ import annotations

from pathlib import PurePath

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

from sinkscope.report.glossary import headers
from sinkscope.report.page import cell_text, png_figure
from sinkscope.report.plots import HEAD_CLASS_COLORS, figure_png, layer_ticks, legend_below, series_styles
from sinkscope.report.tokens_section import top_sink_tokens

TOP_TOKENS = 5  # secondary-sink tokens listed per run
MAX_DIFFERENCE_FIGURES = 6  # pairs of runs of one model drawn as per-head differences
MAX_STORED = 4096  # windows a run's windows.parquet holds (statistics/window_summary.py: MAX_WINDOWS)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
TITLE_SIZE = 9  # points, the per-head difference panels' titles
TITLE_LINES = 2  # lines a run pair may take in such a title before its middle is elided
NO_INTERVAL = "no interval: per-window data not stored"
# Δ column → (summary key, the per-window column whose mean over windows is that summary number)
DELTAS = {"Δ sink rate": "sink_rate", "Δ mean sink": "mean_sink_score", "Δ mean diag": "mean_diag_score"}
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


def _signed(x: float) -> str:
    """Signed to 3 decimals ("0.000" when it rounds to zero: no "-0.000")."""
    text = f"{x:+.3f}"
    return "0.000" if float(text) == 0 else text


def window_column(run, column: str) -> np.ndarray | None:
    """The run's per-window values of `column` (`windows.parquet`), or None where the run did not store them
    (runs of sinkscope before the table, or a column it lacks)."""
    table = run.extra.get("windows")
    if table is None or column not in table or table.empty:
        return None
    return table.sort_values("window")[column].to_numpy(dtype=float)


def same_windows(a, b) -> bool:
    """Whether two runs read the same windows: their per-window tables agree in `tokens_hash` window by window,
    so window w of one is window w of the other and a bootstrap may resample them in pairs."""
    ha, hb = window_column(a, "tokens_hash"), window_column(b, "tokens_hash")
    return ha is not None and hb is not None and len(ha) == len(hb) and bool((ha == hb).all())


def delta_interval(first: np.ndarray, other: np.ndarray, paired: bool, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """95% percentile bootstrap interval of `mean(other) − mean(first)` over windows: each resample draws every
    run's windows with replacement (the same draw for both when `paired`: the runs read the same windows), the
    interval is the 2.5th and 97.5th percentiles of the resampled differences."""
    rng = np.random.default_rng(seed)
    if paired:
        draw = rng.integers(0, len(first), size=(resamples, len(first)))
        diffs = other[draw].mean(1) - first[draw].mean(1)
    else:
        diffs = (other[rng.integers(0, len(other), size=(resamples, len(other)))].mean(1)
                 - first[rng.integers(0, len(first), size=(resamples, len(first)))].mean(1))  # fmt: skip
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float(low), float(high)


def delta_cell(runs: list, index: int, key: str, column: str) -> dict | str:
    """A Δ cell of the summary table: this run's summary number minus the first run's, with its 95% bootstrap
    interval over windows, or `NO_INTERVAL` where either run lacks per-window values; "–" for the first run."""
    if index == 0:
        return "–"
    first, run = runs[0], runs[index]
    value = _signed(run.meta["summary"][key] - first.meta["summary"][key])
    a, b = window_column(first, column), window_column(run, column)
    if a is None or b is None:
        return {"value": value, "interval": NO_INTERVAL,
                "title": "this run or the first has no windows.parquet (made before sinkscope stored it)"}
    paired = same_windows(first, run)
    low, high = delta_interval(a, b, paired)
    how = "paired: both runs read the same windows" if paired else "each run's windows resampled on their own"
    stored = [r.meta["corpus"].get("windows") for r in (run, first)]
    if stored != [len(b), len(a)]:
        how += f"; the table holds the first {MAX_STORED} windows of a run"
    return {"value": value, "interval": f"[{_signed(low)},\u00a0{_signed(high)}]",  # (no break inside)
            "title": f"95% bootstrap interval over windows ({len(b)} and {len(a)} windows, {BOOTSTRAP_RESAMPLES} "
                     f"resamples, {how})"}  # fmt: skip


def sample_note(runs: list, names: list[str]) -> str:
    """What differs in the runs' samples: window counts (a run of few windows has a wide interval) and T (sink
    rates and scores over a longer window average over more positions): empty when neither differs."""
    notes = []
    windows = [run.meta["corpus"].get("windows") for run in runs]
    lengths = [run.meta["corpus"].get("seq_len") for run in runs]
    if len(set(windows)) > 1:
        listed = ", ".join(f"{n} {w}" for n, w in zip(names, windows))
        notes.append(f"The runs differ in windows ({listed}): a run over few windows has a wide interval, and a Δ "
                     "whose interval contains 0 is no difference these windows can show.")  # fmt: skip
    if len(set(lengths)) > 1:
        listed = ", ".join(f"{n} T = {t}" for n, t in zip(names, lengths))
        notes.append(f"The runs differ in T ({listed}): their scores average over windows of different lengths, "
                     "so a Δ mixes the model or corpus with the window length.")  # fmt: skip
    return " ".join(notes)


def corpus_name(source: object) -> str:
    """A corpus as the table shows it: a file or directory by its name (the row's hover gives the run's path)."""
    text = cell_text(source)
    return text if text.startswith(("builtin:", "hf:")) else PurePath(text).name or text


def summary_table(runs: list, names: list[str]) -> dict:
    """Header cells (with definitions), one row of cells per run (a Δ cell is a dict: value, interval and its
    hover), each row's full directory (hover), the ε note (the ε every run thresholds at, or a warning that their
    sink rates used different ε) and the sample note (`sample_note`)."""
    rows = []
    for index, (run, name) in enumerate(zip(runs, names)):
        meta, s = run.meta, run.meta["summary"]
        of_mean, speed = s.get("sink_rate_of_mean"), meta.get("timings", {}).get("tokens_per_second")
        rows.append([
            name, cell_text(meta["model"].get("name")), corpus_name(meta["corpus"].get("source")),
            cell_text(meta["corpus"].get("seq_len")), cell_text(meta["corpus"].get("windows")),
            f"{s['sink_rate']:.3f}", delta_cell(runs, index, "sink_rate", DELTAS["Δ sink rate"]),
            cell_text(None if of_mean is None else f"{of_mean:.3f}"),
            f"{s['mean_sink_score']:.3f}", delta_cell(runs, index, "mean_sink_score", DELTAS["Δ mean sink"]),
            f"{s['mean_diag_score']:.3f}", delta_cell(runs, index, "mean_diag_score", DELTAS["Δ mean diag"]),
            f"{run.layers['mlp_like_frac'].mean():.3f}", cell_text(None if speed is None else f"{speed:.0f}"),
        ])  # fmt: skip
    titles = [str(run.meta.get("directory") or run.name) for run in runs]
    epsilons = sorted({run.meta["summary"]["epsilon"] for run in runs})
    note = (f"Sink rates at ε = {epsilons[0]} for every run." if len(epsilons) == 1 else
            "The runs threshold at different ε (" + ", ".join(map(str, epsilons)) + "): their sink rates differ by "
            "definition, not only by model or corpus.")  # fmt: skip
    return {"header": headers(SUMMARY_COLUMNS), "rows": rows, "titles": titles, "epsilon_note": note,
            "sample_note": sample_note(runs, names),
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
        ax.set_title(label, fontsize=TITLE_SIZE)
        layer_ticks(ax, "x")
        layer_ticks(ax, "y")
        fig.colorbar(image, ax=ax, fraction=0.08, label=label)
    fig.draw_without_rendering()  # the constrained layout sets each panel's width, which the names are fitted to
    for ax, label in zip(axes, ("Δ sink score", "Δ diagonal score")):  # the pair in each panel: no suptitle
        width = ax.get_window_extent().width * 72 / fig.dpi
        ax.set_title(f"{label}\n{fit_name(title, width)}", fontsize=TITLE_SIZE)
    return fig


def fit_name(name: str, width: float, size: float = TITLE_SIZE, lines: int = TITLE_LINES) -> str:
    """`name` broken into lines at most `width` points wide at font size `size` (a line's width: the sum of its
    characters' widths as matplotlib's font measures them), at most `lines` of them: a longer name keeps its start
    and its end around "…", so two panels' titles never overprint; the figure's caption keeps the full name."""
    font, measure, widths = FontProperties(size=size), TextToPath(), {}

    def fits(text: str) -> bool:
        for char in set(text) - widths.keys():
            widths[char] = measure.get_text_width_height_descent(char, font, ismath=False)[0]
        return sum(widths[char] for char in text) <= width

    def wrapped(text: str) -> list[str]:
        rows = []
        while text:
            low, high = 1, len(text)  # the longest start of `text` that fits (at least one character a row)
            while low < high:
                middle = (low + high + 1) // 2
                low, high = (middle, high) if fits(text[:middle]) else (low, middle - 1)
            rows.append(text[:low])
            text = text[low:]
        return rows

    def elided(keep: int) -> str:
        return name[: (keep + 1) // 2] + "…" + name[len(name) - keep // 2 :]

    if len(rows := wrapped(name)) <= lines:
        return "\n".join(rows)
    low, high = 0, len(name) - 1  # the most characters of the name kept around "…" that fit in `lines` rows
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if len(wrapped(elided(middle))) <= lines else (low, middle - 1)
    return "\n".join(wrapped(elided(low)))


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
