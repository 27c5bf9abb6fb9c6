"""One self-contained HTML page for one or more runs (figures embedded as base64 PNG), compared side by side.

Code builds the data (table cells as plain text, figures as PNG bytes); the template `templates/report.html.j2`,
rendered by the one page builder (`sinkscope.report.page`), builds the markup and escapes every text. The PNGs are
also written to `figures/` so they can be pasted into a paper draft.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pandas as pd

from sinkscope.report import plots
from sinkscope.report.page import cell_text, png_figure, render_page, write_page
from sinkscope.report.smoothing_section import smoothing_section
from sinkscope.report.switch_section import switch_section
from sinkscope.report.tokens_section import tokens_section


class ReportedRun(Protocol):
    """What the page reads of a run (`sinkscope.pipelines.run.Run` is one); report/ never imports the run's I/O module."""

    meta: dict
    heads: pd.DataFrame
    layers: pd.DataFrame
    positions: pd.DataFrame
    extra: dict[str, pd.DataFrame]

    @property
    def name(self) -> str: ...


def run_label(run: ReportedRun, index: int) -> str:
    """'2: runs/gemma (gemma3-270m · builtin:prose)': the directory the run was read from, when known."""
    directory = run.meta.get("directory")
    return f"{index + 1}: {directory} ({run.name})" if directory else f"{index + 1}: {run.name}"


def figure_label(run: ReportedRun) -> str:
    """What every figure of a run says it shows: model, corpus and T."""
    return f"{run.meta['model'].get('name', '?')} · {run.meta['corpus'].get('source', '?')} · T={run.meta['corpus'].get('seq_len', '?')}"


SUMMARY_HEADER = ("run", "model", "corpus", "T", "windows", "sink rate", "mean sink", "mean diag", "MLP-like",
                  "head classes", "tokens/s")  # fmt: skip


def _summary_rows(runs: list[ReportedRun]) -> list[list[str]]:
    """One row of cell texts per run, in the order of SUMMARY_HEADER."""
    rows = []
    for index, run in enumerate(runs):
        meta, summary = run.meta, run.meta["summary"]
        classes = ", ".join(f"{k} {v}" for k, v in sorted(summary["head_classes"].items(), key=lambda kv: -kv[1]))
        tokens_per_second = meta.get("timings", {}).get("tokens_per_second")
        rows.append([
            cell_text(meta.get("directory") or index + 1),
            cell_text(meta["model"].get("name")),
            cell_text(meta["corpus"].get("source")),
            cell_text(meta["corpus"].get("seq_len")),
            cell_text(meta["corpus"].get("windows")),
            f"{summary['sink_rate']:.3f} (ε={summary['epsilon']})"
            + (f"; of mean {summary['sink_rate_of_mean']:.3f}" if "sink_rate_of_mean" in summary else ""),
            f"{summary['mean_sink_score']:.3f}",
            f"{summary['mean_diag_score']:.3f}",
            f"{run.layers['mlp_like_frac'].mean():.3f}",
            classes,
            cell_text(None if tokens_per_second is None else f"{tokens_per_second:.0f}"),
        ])  # fmt: skip
    return rows


def run_figures(run: ReportedRun) -> list[tuple[str, str, bytes]]:
    """(file stem, caption, PNG) for every figure of one run."""
    return [
        ("sink_score", "Sink score α = mean_t A[t,0] per layer and head",
         plots.figure_png(plots.head_heatmap(run.heads, "sink_score", "sink score"))),
        ("diag_score", "Diagonal score mean_t A[t,t] per layer and head",
         plots.figure_png(plots.head_heatmap(run.heads, "diag_score", "diagonal score", cmap="Blues"))),
        ("head_classes", "Head classes per layer (thresholds in docs/statistics.md)",
         plots.figure_png(plots.head_classes(run.heads))),
        ("bos_geometry", "BOS geometry across depth: cosine with other tokens and norm ratio",
         plots.figure_png(plots.bos_geometry(run.layers))),
        ("position_sinks", "Per-position sink rate: which keys act as sinks",
         plots.figure_png(plots.position_sinks(run.positions))),
    ]


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
    return {"tokens": tokens, "switch": switch, "smoothing": smoothing}


def report_context(runs: list[ReportedRun], figures_dir: Path | None = None) -> dict:
    """What `templates/report.html.j2` shows for `runs`; with `figures_dir` (one run only), also write its PNGs
    there."""
    comparison = None
    if len(runs) > 1:
        named = [(run_label(run, i), run.layers) for i, run in enumerate(runs)]
        with plots.labelled(f"{len(runs)} runs, legend below"):
            comparison = png_figure(plots.figure_png(plots.compare_runs(named)),
                                    "Sink rate and BOS cosine against relative depth")  # fmt: skip
    pages = []
    for index, run in enumerate(runs):
        with plots.labelled(figure_label(run)):
            figures = run_figures(run)
            extras = _extra_sections(run)
        if figures_dir is not None and len(runs) == 1:
            figures_dir.mkdir(parents=True, exist_ok=True)
            for stem, _, png in figures:
                (figures_dir / f"{stem}.png").write_bytes(png)
        meta, versions = run.meta, run.meta.get("versions", {})
        details = (
            f"T={cell_text(meta['corpus'].get('seq_len'))}, windows={cell_text(meta['corpus'].get('windows'))}, "
            f"BOS id={cell_text(meta['corpus'].get('bos_id'))}, dtype={cell_text(meta['model'].get('dtype'))}, "
            f"sinkscope {cell_text(versions.get('sinkscope'))}, transformers {cell_text(versions.get('transformers'))}"
        )
        pages.append({
            "title": f"Run {run_label(run, index)}",
            "details": details,
            "figures": [png_figure(png, caption) for _, caption, png in figures],
            "sections": extras,
        })  # fmt: skip
    if len(runs) == 1:
        heading = f"sinkscope report: {figure_label(runs[0])}"
    else:
        heading = "sinkscope comparison: " + " vs ".join(str(run.meta.get("directory") or run.name) for run in runs)
    return {"heading": heading, "summary": {"header": SUMMARY_HEADER, "rows": _summary_rows(runs)},
            "comparison": comparison, "runs": pages}  # fmt: skip


def render_report(runs: list[ReportedRun], figures_dir: Path | None = None) -> str:
    """The page for `runs` as one HTML string; with `figures_dir` (one run only), also write its PNGs there."""
    return render_page("report.html.j2", **report_context(runs, figures_dir))


def write_report(runs: list[ReportedRun], path: Path, figures_dir: Path | None = None) -> Path:
    """Write `path` (report.html) for `runs`; with `figures_dir`, also write each run's PNGs there."""
    return write_page(Path(path), "report.html.j2", **report_context(runs, figures_dir))
