"""report.html, report.md, verdicts.json, tables/*.csv and figures/*.png of a reproduction.

The code builds data (sections, verdict rows, figures); the templates `reproduce.html.j2` and `reproduce.md.j2` of
the one page builder (`sinkscope.report.page`) build the markup.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd

from sinkscope.report.page import render_page
from sinkscope.report.plots import no_mathtext
from sinkscope.reproduction.claim_texts import CLAIMS
from sinkscope.reproduction.experiment_figures import CLAIM_FIGURES, claim_figures
from sinkscope.reproduction.files import swapped_directory
from sinkscope.staging import staged_file_bytes

SECTIONS = (
    {
        "number": 1, "title": "Geometry of the BOS token", "figure": "geometry",
        "measurement": "Per layer, on the main corpora: the cosine between the BOS attention input z_0 and every "
        "other token's z_t (mean, max, fraction ≤ 0, per window; the same with a random context token in place of "
        "BOS as the control), the same for the residual h, and the half-space certificates γ1 = dist(0, conv{z_t}), "
        "γ2 = dist(z_0, conv{z_t}) of the middle layers on every context token of enough windows to exceed the "
        "model width, with random context tokens' γ2 as the control (docs/theory/geometry.md).",
    },
    {
        "number": 2, "title": "Oversmoothing", "figure": "smoothing",
        "measurement": "Per head, from the layer's input moments and W = W_V W_O (norm gain folded in): b = tr(ΣW̃), "
        "c = tr(W̃ᵀΣW̃); dense attention smooths more than the identity iff 2b + c > 0. Observed: the mean "
        "pairwise cosine of X + A_λ Z W on real windows for λ = 0 … 1 (`sinkscope analyze --smoothing`, "
        "docs/theory/oversmoothing.md).",
    },
    {
        "number": 3, "title": "Hard switch ⇔ sink", "figure": "switch",
        "measurement": "Per head and window: queries switched off (‖o_t‖ ≤ τ · mean_{j≤t} ‖v_j‖, the keys the "
        "query sees), hard sinks (A[t,0] ≥ 0.9) and both, and the head's value drain ‖v_0‖ / mean ‖v_j‖; each "
        "direction of the theorem judged per head (switch ⇒ sink; sink ⇒ switch where the value drains), with "
        "the pooled table drawn as curves over τ = 0.025 … 1 (described); every "
        "switched-off query split by the route that makes its output small (BOS sink, mostly-BOS attention, "
        "cancellation, self attention on a small value, low-norm keys); value drain ‖v_0‖ / mean ‖v_j‖ per "
        "key/value group against its hard-sink fraction (rank correlation, also within layers); the MLP-like "
        "fraction of each layer; loss change when the most sink-like heads are zeroed on their sink queries, vs "
        "the same heads on non-sink queries and random heads and queries; attention moved to BOS (a measurement).",
    },
    {
        "number": 4, "title": "Cost of a sink vs a diagonal pattern", "figure": "cost",
        "measurement": "Minimum nuclear norm of W_QK realising each pattern with margin κ = 1: closed forms on "
        "orthonormal embeddings for T = 2 … 1024 (exponent fitted on T ≥ 64), exact convex programs at small T "
        "beside them, and exact programs on the models' raw attention inputs at T = 8, 16, 32 (docs/theory/cost.md).",
    },
    {
        "number": 5, "title": "Weights of the real models", "figure": "weights",
        "measurement": "Per head, singular values of W_QK = W_Q W_Kᵀ (kv group's key map, QK-norm gains and score "
        "scaling folded in) at relative offset 0 — with RoPE the score at offset Δ is W_Q R(Δ) W_Kᵀ, so offset 0 "
        "is the only position-free form — and of W_VO = W_V W_O; effective rank exp(H(σ/Σσ)), ‖·‖_*/‖·‖_F, and "
        "how the layer's BOS input z_0 meets the form: gain ‖W ẑ_0ᵀ‖/σ₁ on the key side of W_QK (1: along the "
        "top key direction), ‖ẑ_0 W‖/σ₁ on the input side of W_VO; and the theory's rank-1 reading p̂ W_QK(Δ) q̂ᵀ/σ₁ "
        "(p̂, q̂ the layer's certificate directions) averaged over the RoPE offsets Δ = 1 … T−1 at which queries "
        "score the BOS key. Sink heads: head class sink (mean sink score > 0.3).",
    },
    {
        "number": 6, "title": "Anchors from earlier work", "figure": "anchors",
        "measurement": "Gu et al. 2025's sink rate (per window, ε = 0.3, T = 64) on builtin:prose, builtin:random "
        "and builtin:repeat; Sandoval-Segura et al. 2025's dormant heads (AHON-LN ≤ 0.5) and the loss change "
        "when the heads with the lowest AHON-LN are zeroed, vs random heads.",
    },
)  # fmt: skip


def _png(fig) -> bytes:
    from sinkscope.report.plots import figure_png

    return figure_png(fig)


def _figures(evidence: dict[str, dict], theory: pd.DataFrame, extra: dict[str, pd.DataFrame]) -> dict[str, bytes]:
    """One figure per section, and one per claim of issue 36 whose data this reproduction has (named by the claim:
    `experiment_figures.claim_figures`)."""
    from sinkscope.reproduction import figures
    claims = {claim: _png(fig) for claim, fig in claim_figures(evidence, extra).items()}
    return claims | {
        "geometry": _png(figures.geometry_figure(evidence)),
        "smoothing": _png(figures.smoothing_figure(evidence)),
        "switch": _png(figures.switch_figure(evidence)),
        "ablation": _png(figures.ablation_figure(evidence)),
        "cost": _png(figures.cost_figure(theory, evidence)),
        "weights": _png(figures.weights_figure(evidence)),
        "anchors": _png(figures.anchors_figure(evidence)),
    }


def _number(value) -> str:
    if value is None:
        return "–"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _evidence_text(evidence: dict) -> str:
    """A short `key = value` line of the scalar evidence (lists are in the linked tables)."""
    parts = []
    for key, value in evidence.items():
        if isinstance(value, (int, float, str, bool)) or value is None:
            parts.append(f"{key} = {_number(value)}")
        elif isinstance(value, dict):
            inner = ", ".join(f"{k}: {_number(v)}" for k, v in value.items() if not isinstance(v, (list, dict)))
            parts.append(f"{key} = {{{inner}}}")
    return "; ".join(parts)


def interval_text(interval: dict | None, evidence: dict) -> str:
    """'effect 0.51 [0.32, 0.95] (95 %, 8 random draws)', or why there is none."""
    if not interval:
        return evidence.get("interval_note") or "–"
    estimate, low, high = (interval.get(k) for k in ("estimate", "low", "high"))
    if estimate is None:
        return f"{interval['effect']}: undefined"
    bounds = f" [{_number(low)}, {_number(high)}]" if low is not None and high is not None else ""
    return f"{interval['effect']} {_number(estimate)}{bounds} ({interval['level']:.0%}, {interval['n']} {interval['over']})"


def sensitivity_text(sensitivity: list[dict]) -> str:
    """'δ ×½ → partly · δ ×2 → supported · head_fraction: not varied (REASON)', one entry per threshold and
    scale; a threshold the measurement fixed says so, with the reason."""

    def entry(r: dict) -> str:
        name = r["threshold"] if r["scale"] is None else f"{r['threshold']} ×{'½' if r['scale'] == 0.5 else '2'}"
        return f"{name}: not varied ({r['not_varied']})" if r.get("not_varied") else f"{name} → {r['verdict']}"

    return " · ".join(entry(r) for r in sensitivity)


def section_data(summary: dict, table_names: list[str], figure_names=()) -> list[dict]:
    """Sections with their claims (the paper's words, test, why, control, the table linked when `table_names`
    has it, the claim's own figure when `figure_names` has one by the claim's name), each claim with its verdict rows (model, corpus, verdict, reason, interval, sensitivity, evidence,
    thresholds) as plain text."""
    out = []
    for section in SECTIONS:
        claims = []
        for claim, spec in CLAIMS.items():
            if spec.section != section["number"]:
                continue
            rows = [v | {"evidence_text": _evidence_text(v["evidence"]),
                         "interval_text": interval_text(v.get("interval"), v["evidence"]),
                         "sensitivity_text": sensitivity_text(v.get("sensitivity") or []),
                         "thresholds_text": ", ".join(f"{k} = {_number(x)}" for k, x in v["thresholds"].items())}
                    for v in summary["verdicts"] if v["claim"] == claim]  # fmt: skip
            claims.append({"id": claim, "paper_claim": spec.paper_claim, "test": spec.test, "why": spec.why,
                           "control": spec.control, "rows": rows,
                           "table": f"tables/{spec.table}.csv" if f"{spec.table}.csv" in table_names else None,
                           "figure": claim if claim in figure_names and claim in CLAIM_FIGURES else None})  # fmt: skip
        out.append(section | {"claims": claims})
    return out


def model_note(models: list[str]) -> str:
    """What the embedded models are (quantised builds, not the original checkpoints), for the page header."""
    from sinkscope.models.load import EMBEDDED

    builds = [f"{name}: {EMBEDDED[name].build}" for name in models if name in EMBEDDED]
    return "; ".join(builds)


def write_tables(
    directory: Path, evidence: dict[str, dict], theory: pd.DataFrame, regimes: pd.DataFrame | None = None,
    extra: dict[str, pd.DataFrame] | None = None,
) -> list[str]:
    """tables/NAME.csv: each evidence table over models (a `model` column first), cost_theory.csv, each model-free
    table of `extra` and, when the regime map ran, regime_cells.csv."""
    names = []
    for name in ("geometry", "switch", "switch_heads", "switch_routes", "value_drain", "certificates", "heads", "weights", "ablation", "cost_layers",
                 "anchors", "eviction", "dense", "prevalence", "switch_assumptions", "kv_plan"):
        frames = [tables[name].assign(model=model) for model, tables in evidence.items() if name in tables]
        if frames:
            frame = pd.concat(frames, ignore_index=True)
            frame = frame[["model", *[c for c in frame.columns if c != "model"]]]
            frame.to_csv(directory / f"{name}.csv", index=False)
            names.append(f"{name}.csv")
    theory.to_csv(directory / "cost_theory.csv", index=False)
    names.append("cost_theory.csv")
    for name, frame in (extra or {}).items():
        frame.to_csv(directory / f"{name}.csv", index=False)
        names.append(f"{name}.csv")
    if regimes is not None:
        regimes.to_csv(directory / "regime_cells.csv", index=False)
        names.append("regime_cells.csv")
    return names


@no_mathtext()
def write_reports(out: Path, summary: dict, evidence: dict[str, dict], theory: pd.DataFrame, regimes: dict,
                  extra: dict[str, pd.DataFrame] | None = None) -> None:  # fmt: skip
    """Write verdicts.json, tables/, figures/, report.md and report.html into `out` (`extra`: model-free tables)."""
    with swapped_directory(out / "tables") as staging:
        table_names = write_tables(staging, evidence, theory, regimes.get("cells"), extra)
    figures = _figures(evidence, theory, extra or {})
    with swapped_directory(out / "figures") as staging:
        for name, png in figures.items():
            (staging / f"{name}.png").write_bytes(png)
    staged_file_bytes(out / "verdicts.json", json.dumps(summary["verdicts"], indent=2, ensure_ascii=False).encode())
    staged_file_bytes(out / "summary.json", json.dumps(summary, indent=2, ensure_ascii=False, default=str).encode())
    context = {
        "summary": summary,
        "sections": section_data(summary, table_names, figures),
        "tables": table_names,
        "figures": {name: base64.b64encode(png).decode() for name, png in figures.items()},
        "regime_reason": regimes.get("reason", ""),
        "n_reused": sum(len(labels) for labels in summary["reused"].values()),
        "model_note": model_note(summary["config"]["models"]),
    }
    for name, template in (("report.md", "reproduce.md.j2"), ("report.html", "reproduce.html.j2")):
        staged_file_bytes(out / name, render_page(template, **context).encode("utf-8"))  # whole, or the old one stays
