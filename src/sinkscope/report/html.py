"""One self-contained HTML page for one or more runs (figures embedded as base64 PNG), compared side by side.

The PNGs are also written to `figures/` so they can be pasted into a paper draft.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from sinkscope.report import plots
from sinkscope.report.smoothing_section import smoothing_section
from sinkscope.report.switch_section import switch_section
from sinkscope.report.tokens_section import tokens_section
from sinkscope.staging import staged_file

if TYPE_CHECKING:
    from sinkscope.run import Run

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;
 color:#1b2631;line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #d5d8dc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.9em;margin:1em 0;display:block;max-width:100%;overflow-x:auto} td,th{border:1px solid #d5d8dc;padding:.3em .6em}
th{background:#f4f6f7;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{display:inline-block;margin:.5em 1em .5em 0;vertical-align:top} img{max-width:100%}
figcaption{font-size:.85em;color:#566573} .note{color:#566573;font-size:.9em}
"""


def _text(value) -> str:
    """A table cell's text: missing values show as an en dash, never as 'None' or 'nan'."""
    return "–" if value is None or (isinstance(value, float) and value != value) else html.escape(str(value))


def run_label(run: Run, index: int) -> str:
    """'2: runs/gemma (gemma3-270m · builtin:prose)': the directory the run was read from, when known."""
    directory = run.meta.get("directory")
    return f"{index + 1}: {directory} ({run.name})" if directory else f"{index + 1}: {run.name}"


def figure_label(run: Run) -> str:
    """What every figure of a run says it shows: model, corpus and T."""
    return f"{run.meta['model'].get('name', '?')} · {run.meta['corpus'].get('source', '?')} · T={run.meta['corpus'].get('seq_len', '?')}"


def _summary_table(runs: list[Run]) -> str:
    header = ["run", "model", "corpus", "T", "windows", "sink rate", "mean sink", "mean diag", "MLP-like",
              "head classes", "tokens/s"]
    rows = []
    for index, run in enumerate(runs):
        meta, summary = run.meta, run.meta["summary"]
        classes = ", ".join(f"{k} {v}" for k, v in sorted(summary["head_classes"].items(), key=lambda kv: -kv[1]))
        cells = [
            _text(meta.get("directory") or index + 1),
            _text(meta["model"].get("name")),
            _text(meta["corpus"].get("source")),
            _text(meta["corpus"].get("seq_len")),
            _text(meta["corpus"].get("windows")),
            f"{summary['sink_rate']:.3f} (ε={summary['epsilon']})"
            + (f"; of mean {summary['sink_rate_of_mean']:.3f}" if "sink_rate_of_mean" in summary else ""),
            f"{summary['mean_sink_score']:.3f}",
            f"{summary['mean_diag_score']:.3f}",
            f"{run.layers['mlp_like_frac'].mean():.3f}",
            html.escape(classes),
            _text(None if "tokens_per_second" not in meta.get("timings", {}) else f"{meta['timings']['tokens_per_second']:.0f}"),
        ]
        rows.append("<tr>" + "".join(f'<td class="num">{c}</td>' for c in cells) + "</tr>")
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>" + "".join(rows) + "</table>"


def run_figures(run: Run) -> list[tuple[str, str, bytes]]:
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


def _extra_sections(run: Run) -> str:
    """The sections a run has the tables for: secondary sinks, switches and geometry, oversmoothing."""
    meta = run.meta
    body = tokens_section(run.extra.get("tokens"), run.extra.get("token_layers"), meta["corpus"].get("bos_id"),
                          meta["summary"]["epsilon"])  # fmt: skip
    body += switch_section(run.heads, run.layers, run.extra.get("ablation"))
    if "smooth_b" in run.heads.columns:  # analyze --smoothing
        body += smoothing_section(run.heads, run.layers, run.extra.get("smoothing_curves"))
    return body


def write_report(runs: list[Run], path: Path, figures_dir: Path | None = None) -> Path:
    """Write `path` (report.html) for `runs`; with `figures_dir`, also write each run's PNGs there."""
    path = Path(path)
    sections = []
    if len(runs) > 1:
        named = [(run_label(run, i), run.layers) for i, run in enumerate(runs)]
        with plots.labelled(f"{len(runs)} runs, legend below"):
            png = plots.figure_png(plots.compare_runs(named))
        sections.append("<h2>Comparison</h2>" + plots.embed_png(png, "Sink rate and BOS cosine against relative depth"))
    for index, run in enumerate(runs):
        with plots.labelled(figure_label(run)):
            figures = run_figures(run)
            extras = _extra_sections(run)
        if figures_dir is not None and len(runs) == 1:
            figures_dir.mkdir(parents=True, exist_ok=True)
            for stem, _, png in figures:
                (figures_dir / f"{stem}.png").write_bytes(png)
        meta = run.meta
        title = html.escape(f"Run {run_label(run, index)}")
        versions = meta.get("versions", {})
        details = html.escape(
            f"T={_text(meta['corpus'].get('seq_len'))}, windows={_text(meta['corpus'].get('windows'))}, "
            f"BOS id={_text(meta['corpus'].get('bos_id'))}, dtype={_text(meta['model'].get('dtype'))}, "
            f"sinkscope {_text(versions.get('sinkscope'))}, transformers {_text(versions.get('transformers'))}"
        )
        body = "".join(plots.embed_png(png, caption) for _, caption, png in figures) + extras
        sections.append(f"<h2>{title}</h2><p class='note'>{details}</p>{body}")
    if len(runs) == 1:
        heading = f"sinkscope report: {figure_label(runs[0])}"
    else:
        heading = "sinkscope comparison: " + " vs ".join(
            str(run.meta.get("directory") or run.name) for run in runs
        )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(heading)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(heading)}</h1>"
        "<p class='note'>Attention sinks, diagonal patterns and BOS geometry (definitions: docs/statistics.md). "
        "Sink rate (Gu et al. 2025) = fraction of (window, layer, head) whose sink score exceeds ε; "
        "'of mean' thresholds each head's sink score averaged over windows instead.</p>"
        f"{_summary_table(runs)}{''.join(sections)}</body></html>"
    )
    with staged_file(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path
