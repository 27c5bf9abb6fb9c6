"""Figures of every lab curve and the self-contained `report.html` of a run (PNG embedded as base64)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from matplotlib.figure import Figure

from sinkscope.report.glossary import TRAIN_BB_TERMS, definitions, headers
from sinkscope.report.page import cell_text, png_figure, render_page
from sinkscope.report.plots import _stamp, no_mathtext, plain_text
from sinkscope.synthetic.bigram_backcopy import GBBBatch
from sinkscope.synthetic.tiny_transformer import TinyTransformer

if TYPE_CHECKING:
    from sinkscope.synthetic.config import RunConfig

# (file stem, title, [(column, label)]) for the per-head curves; one line per head and column.
HEAD_CURVES = (
    ("patterns", "Attention on non-trigger queries (BOS, diagonal, t−k) and after triggers (copy: t−k)",
     [("bos_attn", "BOS"), ("diag_attn", "diag"), ("prev_attn", "t−k"), ("copy_attn", "copy"),
      ("entropy", "entropy")]),
    ("switch", "Row mass and output gate on non-trigger queries",
     [("row_mass", "row mass"), ("gate_plain", "gate (non-trigger)"), ("gate_copy", "gate (copy)")]),
    ("drain", "Value drain ‖v₀‖/mean‖v_j‖ and BOS residual norm ratio",
     [("value_drain", "value drain"), ("bos_resid_ratio", "BOS residual ratio")]),
    ("wqk", "W_QK norms", [("wqk_nuclear", "nuclear"), ("wqk_frobenius", "Frobenius")]),
    ("margins", "Median margins κ on non-trigger queries", [("sink_margin", "sink"), ("diag_margin", "diag")]),
)


def settings_label(config: RunConfig) -> str:
    """One line naming the model and task settings of a run and T (positions per sequence, BOS included)."""
    m, t = config.model, config.task
    return (f"gBB lab: {m.n_layers}L×{m.n_heads}H d={m.d_model} {m.attention} {m.positional} init={m.init}"
            f"{'' if m.mlp else ' no-MLP'} · V={t.vocab_size} K={t.n_triggers} k={t.copy_offset} p_copy={t.p_copy}"
            f"{'' if t.bos else ' no-BOS'} · T={t.length} · wd={config.train.weight_decay} seed {config.train.seed}")


def _save(fig: Figure, label: str, path: Path) -> None:
    fig.tight_layout()
    _stamp(fig, label)
    with plain_text(fig):  # numeric ticks (the log loss axis) keep mathtext, the run's names are literal
        fig.savefig(path, dpi=90, bbox_inches="tight")


def _head_figure(metrics: pd.DataFrame, title: str, columns: list[tuple[str, str]], path: Path, label: str) -> None:
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    for (layer, head), group in metrics.groupby(["layer", "head"]):
        for column, label in columns:
            if group[column].notna().any():
                ax.plot(group["step"], group[column], label=f"L{layer}H{head} {label}")
    ax.set_xlabel("step")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    _save(fig, label, path)


# Excess losses at or below this are drawn at it on the log axis (sampling noise can make them ≤ 0).
EXCESS_FLOOR = 1e-4


def _model_figure(metrics: pd.DataFrame, path: Path, label: str) -> None:
    """Loss against the Bayes optimum (linear, nats), excess loss on non-copy positions (log), copy accuracy."""
    per_step = metrics.drop_duplicates("step")
    fig = Figure(figsize=(11, 3.4))
    left, middle, right = fig.subplots(1, 3)
    left.plot(per_step["step"], per_step["loss"], label="eval loss")
    left.plot(per_step["step"], per_step["bayes_loss"], "--", label="Bayes optimum")
    left.set_ylabel("cross-entropy (nats/token)")
    left.set_title("Loss", fontsize=10)
    middle.plot(per_step["step"], per_step["excess_loss_noncopy"].clip(lower=EXCESS_FLOOR))
    middle.set_yscale("log")
    middle.set_ylabel("excess loss, non-copy (nats, log)")
    middle.set_title(f"Loss above Bayes on non-copy positions (≤{EXCESS_FLOOR:g} drawn at it)", fontsize=9)
    right.plot(per_step["step"], per_step["copy_acc"])
    right.set_ylim(0, 1.02)
    right.set_ylabel("copy accuracy")
    right.set_title("Copy accuracy after triggers", fontsize=10)
    left.legend(fontsize=8)
    for ax in (left, middle, right):
        ax.set_xlabel("step")
    _save(fig, label, path)


@torch.no_grad()
def _attention_maps(model: TinyTransformer, batch: GBBBatch, path: Path, label: str, n_positions: int = 32) -> None:
    """Final attention of every head on the eval sequence with the most copies; red crosses mark the sources."""
    model.eval()
    seq = int(batch.is_copy[:, :n_positions].sum(1).argmax())
    _, traces = model(batch.inputs[seq:seq + 1, :n_positions])
    n_layers, n_heads = len(traces), traces[0].probs.shape[1]
    fig = Figure(figsize=(max(3.2 * n_heads, 6.4), 3.0 * n_layers))
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    copy_rows = torch.nonzero(batch.is_copy[seq, :n_positions]).flatten()
    copy_cols = batch.copy_key[seq, copy_rows]
    for layer, trace in enumerate(traces):
        for head in range(n_heads):
            ax = axes[layer][head]
            ax.imshow(trace.probs[0, head].numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.scatter(copy_cols, copy_rows, marker="x", s=12, color="red", linewidths=0.8)
            ax.set_title(f"layer {layer} head {head}", fontsize=9)
            ax.set_xlabel("key position", fontsize=8)
            ax.set_ylabel("query position", fontsize=8)
    _save(fig, f"{label} · first {min(n_positions, batch.inputs.shape[1])} positions, × = copy source", path)


@no_mathtext()
def write_figures(
    metrics: pd.DataFrame, model: TinyTransformer, batch: GBBBatch, fig_dir: Path, config: RunConfig
) -> list[Path]:
    """All figures of a run into `fig_dir`, each stamped with `settings_label(config)`; returns their paths in
    report order."""
    label = settings_label(config)
    fig_dir.mkdir(parents=True, exist_ok=True)
    paths = [fig_dir / "losses.png"]
    _model_figure(metrics, paths[0], label)
    for stem, title, columns in HEAD_CURVES:
        paths.append(fig_dir / f"{stem}.png")
        _head_figure(metrics, title, columns, paths[-1], label)
    paths.append(fig_dir / "attention_maps.png")
    _attention_maps(model, batch, paths[-1], label)
    return paths


def _table(rows: list[dict[str, Any]]) -> dict[str, list] | None:
    """Header cells (each with its definition, `glossary.TRAIN_BB_TERMS`) and cell texts of `rows` (one dict per
    row, same keys): floats to 4 significant digits, None as –."""
    if not rows:
        return None
    return {"header": headers([str(k) for k in rows[0]], terms=TRAIN_BB_TERMS),
            "rows": [[f"{v:.4g}" if isinstance(v, float) else cell_text(v) for v in row.values()] for row in rows]}


def write_report(path: Path, config: RunConfig, summary: dict[str, Any], figures: list[Path]) -> None:
    """A single HTML page (`report/templates/train_bb.html.j2`): headline numbers, final heads, cost predictions,
    figures, config."""
    headline = {k: summary[k] for k in (
        "final_step", "seconds", "loss", "bayes_loss", "excess_loss_noncopy", "copy_acc",
        "copy_head_wqk_nuc_over_fro", "copy_head_pred_nuclear",
        "first_step_copy_acc_0.9", "first_step_copy_head_bos_0.5", "first_step_copy_head_diag_0.5",
    )}
    label = settings_label(config)
    tables = {"headline": _table([headline]), "heads": _table(summary["heads"]),
              "predictions": _table([summary["predictions"]])}
    page = render_page(
        "train_bb.html.j2", summary=summary, tables=tables,
        terms=definitions(*(table["header"] for table in tables.values() if table)),
        figures=[png_figure(p.read_bytes(), f"{p.stem}: {label}", alt=f"{p.stem} ({label})") for p in figures],
        config=json.dumps(config.to_dict(), indent=2),
    )  # fmt: skip
    path.write_text(page, encoding="utf-8")
