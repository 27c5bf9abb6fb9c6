"""One self-contained HTML page for one run, or the comparison of several (figures embedded as base64 PNG).

Code builds the data (table cells as plain text, figures as PNG bytes, header cells with their definitions from
`glossary`); the template `templates/report.html.j2`, rendered by the one page builder (`sinkscope.report.page`),
builds the markup and escapes every text. A run's figures are also written to `figures/` as PNG and SVG (vector,
for a paper). The comparison itself (summary with differences, shared-depth figures, head classes, per-head
differences, secondary sinks) is `report/compare.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report import plots
from sinkscope.report.compare import comparison, corpus_name, short_names
from sinkscope.report.glossary import definitions, headers
from sinkscope.report.massive_section import massive_comparison, massive_section
from sinkscope.report.page import cell_text, png_figure, render_page, write_page
from sinkscope.report.smoothing_section import smoothing_section
from sinkscope.report.switch_section import switch_section
from sinkscope.report.tokens_section import tokens_section
from sinkscope.staging import staged_file_bytes


class ReportedRun(Protocol):
    """What the page reads of a run (`sinkscope.pipelines.run.Run` is one); report/ never imports the run's I/O module."""

    meta: dict
    heads: pd.DataFrame
    layers: pd.DataFrame
    positions: pd.DataFrame
    extra: dict[str, pd.DataFrame]

    @property
    def name(self) -> str: ...


def figure_label(run: ReportedRun) -> str:
    """What every figure of a run says it shows: model, corpus and T."""
    return f"{run.meta['model'].get('name', '?')} · {run.meta['corpus'].get('source', '?')} · T={run.meta['corpus'].get('seq_len', '?')}"


SUMMARY_HEADER = ("run", "model", "corpus", "T", "windows", "epsilon", "sink rate", "of mean", "mean sink",
                  "mean diag", "MLP-like", "head classes", "tokens/s")  # fmt: skip


def _summary_rows(runs: list[ReportedRun], names: list[str]) -> list[list[str]]:
    """One row of cell texts per run, in the order of SUMMARY_HEADER."""
    rows = []
    for run, name in zip(runs, names):
        meta, summary = run.meta, run.meta["summary"]
        classes = ", ".join(f"{k} {v}" for k, v in sorted(summary["head_classes"].items(), key=lambda kv: -kv[1]))
        tokens_per_second = meta.get("timings", {}).get("tokens_per_second")
        of_mean = summary.get("sink_rate_of_mean")
        rows.append([
            name,
            cell_text(meta["model"].get("name")),
            corpus_name(meta["corpus"].get("source")),  # the full path: the row's hover and the page heading
            cell_text(meta["corpus"].get("seq_len")),
            cell_text(meta["corpus"].get("windows")),
            cell_text(summary["epsilon"]),
            f"{summary['sink_rate']:.3f}",
            cell_text(None if of_mean is None else f"{of_mean:.3f}"),
            f"{summary['mean_sink_score']:.3f}",
            f"{summary['mean_diag_score']:.3f}",
            f"{run.layers['mlp_like_frac'].mean():.3f}",
            classes,
            cell_text(None if tokens_per_second is None else f"{tokens_per_second:.0f}"),
        ])  # fmt: skip
    return rows


def run_figures(run: ReportedRun) -> list[tuple[str, str, Figure]]:
    """(file stem, caption, figure) for every figure of one run (the learned-sink score's where the model has one)."""
    learned = []
    if "learned_sink_score" in run.heads.columns:
        learned = [("learned_sink_score", "Learned-sink score mean_t m_t (the s_aux column) per layer and head",
                    plots.head_heatmap(run.heads, "learned_sink_score", "learned-sink score", cmap="Purples"))]
    return [
        ("sink_score", "Sink score α = mean_t A[t,0] per layer and head",
         plots.head_heatmap(run.heads, "sink_score", "sink score")),
        *learned,
        ("diag_score", "Diagonal score mean_t A[t,t] per layer and head",
         plots.head_heatmap(run.heads, "diag_score", "diagonal score", cmap="Blues")),
        ("head_classes", "Head classes per layer (thresholds in docs/statistics.md)", plots.head_classes(run.heads)),
        ("bos_geometry", "BOS geometry across depth: cosine with other tokens and norm ratio",
         plots.bos_geometry(run.layers)),
        ("position_sinks", "Per-position sink rate: which keys act as sinks", plots.position_sinks(run.positions)),
    ]  # fmt: skip


def _extra_sections(run: ReportedRun) -> dict:
    """The data of the sections a run has the tables for (the `*_section.html.j2` templates draw them): secondary
    sinks (None without a key-token table), switches and geometry, oversmoothing (None unless analyze --smoothing)."""
    meta = run.meta
    tokens = tokens_section(run.extra.get("tokens"), run.extra.get("token_layers"), meta["corpus"].get("bos_id"),
                            meta["summary"]["epsilon"])  # fmt: skip
    switch = switch_section(run.heads, run.layers, run.extra.get("ablation"))
    smoothing = None
    if "smooth_b" in run.heads.columns:  # analyze --smoothing
        smoothing = smoothing_section(run.heads, run.layers, run.extra.get("smoothing_curves"))
    return {"tokens": tokens, "switch": switch, "smoothing": smoothing, "massive": massive_section(run.layers)}


def _run_page(run: ReportedRun, name: str, figures_dir: Path | None) -> dict:
    """One run's figures and sections; with `figures_dir`, its figures also written there as PNG and SVG."""
    with plots.labelled(figure_label(run)):
        pngs = []
        for stem, caption, fig in run_figures(run):
            png = plots.figure_png(fig)
            pngs.append(png_figure(png, caption))
            if figures_dir is not None:
                figures_dir.mkdir(parents=True, exist_ok=True)
                staged_file_bytes(figures_dir / f"{stem}.png", png)  # whole or not at all: a full disk keeps the old
                staged_file_bytes(figures_dir / f"{stem}.svg", plots.figure_svg(fig))
        extras = _extra_sections(run)
    meta, versions = run.meta, run.meta.get("versions", {})
    details = (
        f"T={cell_text(meta['corpus'].get('seq_len'))}, windows={cell_text(meta['corpus'].get('windows'))}, "
        f"BOS id={cell_text(meta['corpus'].get('bos_id'))}, dtype={cell_text(meta['model'].get('dtype'))}, "
        f"sinkscope {cell_text(versions.get('sinkscope'))}, transformers {cell_text(versions.get('transformers'))}"
    )
    if meta["model"].get("build"):  # an embedded model: a quantised build, not the original checkpoint
        details = f"{meta['model']['build']}; {details}"
    return {"title": f"{name}: {figure_label(run)}", "directory": cell_text(meta.get("directory")),
            "details": details, "figures": pngs, "sections": extras}  # fmt: skip


def report_context(runs: list[ReportedRun], figures_dir: Path | None = None) -> dict:
    """What `templates/report.html.j2` shows for `runs`: one run's report, or the comparison of several (their
    differences first, each run's own report folded below); with `figures_dir` (one run only), also write the
    run's figures there (PNG and SVG)."""
    names = short_names(runs)
    summary_header = headers(SUMMARY_HEADER)
    comparing = None
    if len(runs) > 1:
        with plots.labelled(f"{len(runs)} runs: " + ", ".join(names)):
            comparing = comparison(runs, names)
            comparing["massive"] = massive_comparison(runs, names)
    pages = [_run_page(run, name, figures_dir if len(runs) == 1 else None) for run, name in zip(runs, names)]
    if len(runs) == 1:
        heading = f"sinkscope report: {figure_label(runs[0])}"
        used = [summary_header]
    else:
        heading = "sinkscope comparison: " + " vs ".join(names)
        used = [comparing["summary"]["header"], comparing["classes"]["table"]["header"], comparing["sinks"]["header"]]
    for page in pages:
        used.extend(section["header"] for section in _tables_of(page["sections"]))
    return {
        "heading": heading,
        "summary": {"header": summary_header, "rows": _summary_rows(runs, names),
                    "titles": [f"{run.meta.get('directory') or run.name}: {cell_text(run.meta['corpus'].get('source'))}"
                               for run in runs]},
        "comparison": comparing,
        "runs": pages,
        "terms": definitions(*used),
    }  # fmt: skip


def _tables_of(sections: dict) -> list[dict]:
    """The tables (dicts with a `header`) of a run's sections, for the page's Definitions list."""
    tables = []
    if sections["tokens"]:
        tables.append(sections["tokens"])
    if sections.get("massive"):
        tables.append(sections["massive"])
    switch = sections["switch"]
    if switch["switch"]:
        tables.append(switch["switch"]["counts"])
    if switch["ablation"]:
        tables.append(switch["ablation"]["table"])
    return tables


def render_report(runs: list[ReportedRun], figures_dir: Path | None = None) -> str:
    """The page for `runs` as one HTML string; with `figures_dir` (one run only), also write its PNGs there."""
    return render_page("report.html.j2", **report_context(runs, figures_dir))


@plots.no_mathtext()
def write_report(runs: list[ReportedRun], path: Path, figures_dir: Path | None = None) -> Path:
    """Write `path` (report.html) for `runs`; with `figures_dir`, also write each run's PNGs there."""
    return write_page(Path(path), "report.html.j2", **report_context(runs, figures_dir))
