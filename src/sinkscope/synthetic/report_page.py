"""Figures of every lab curve and the self-contained `report.html` of a run (PNG embedded as base64)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after selecting the Agg backend)
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from sinkscope.synthetic.bigram_backcopy import GBBBatch  # noqa: E402
from sinkscope.synthetic.tiny_transformer import TinyTransformer  # noqa: E402

if TYPE_CHECKING:
    from sinkscope.synthetic.train import RunConfig

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


def _head_figure(metrics: pd.DataFrame, title: str, columns: list[tuple[str, str]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for (layer, head), group in metrics.groupby(["layer", "head"]):
        for column, label in columns:
            if group[column].notna().any():
                ax.plot(group["step"], group[column], label=f"L{layer}H{head} {label}")
    ax.set_xlabel("step")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _model_figure(metrics: pd.DataFrame, path: Path) -> None:
    per_step = metrics.drop_duplicates("step")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    left.plot(per_step["step"], per_step["loss"], label="loss")
    left.plot(per_step["step"], per_step["bayes_loss"], "--", label="Bayes optimum")
    left.plot(per_step["step"], per_step["excess_loss_noncopy"], label="excess loss (non-copy)")
    left.set_yscale("symlog", linthresh=0.01)
    left.legend(fontsize=8)
    right.plot(per_step["step"], per_step["copy_acc"], label="copy accuracy")
    right.set_ylim(0, 1.02)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


@torch.no_grad()
def _attention_maps(model: TinyTransformer, batch: GBBBatch, path: Path, n_positions: int = 32) -> None:
    """Final attention of every head on the eval sequence with the most copies; red crosses mark the sources."""
    model.eval()
    seq = int(batch.is_copy[:, :n_positions].sum(1).argmax())
    _, traces = model(batch.inputs[seq:seq + 1, :n_positions])
    n_layers, n_heads = len(traces), traces[0].probs.shape[1]
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(3.2 * n_heads, 3.0 * n_layers), squeeze=False)
    copy_rows = torch.nonzero(batch.is_copy[seq, :n_positions]).flatten()
    copy_cols = batch.copy_key[seq, copy_rows]
    for layer, trace in enumerate(traces):
        for head in range(n_heads):
            ax = axes[layer][head]
            ax.imshow(trace.probs[0, head].numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.scatter(copy_cols, copy_rows, marker="x", s=12, color="red", linewidths=0.8)
            ax.set_title(f"layer {layer} head {head}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_figures(metrics: pd.DataFrame, model: TinyTransformer, batch: GBBBatch, fig_dir: Path) -> list[Path]:
    """All figures of a run into `fig_dir`; returns their paths in report order."""
    fig_dir.mkdir(parents=True, exist_ok=True)
    paths = [fig_dir / "losses.png"]
    _model_figure(metrics, paths[0])
    for stem, title, columns in HEAD_CURVES:
        paths.append(fig_dir / f"{stem}.png")
        _head_figure(metrics, title, columns, paths[-1])
    paths.append(fig_dir / "attention_maps.png")
    _attention_maps(model, batch, paths[-1])
    return paths


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join(
        "<tr>" + "".join(
            f"<td>{v:.4g}</td>" if isinstance(v, float) else f"<td>{'–' if v is None else html.escape(str(v))}</td>"
            for v in row.values()
        ) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(path: Path, config: RunConfig, summary: dict[str, Any], figures: list[Path]) -> None:
    """A single HTML page: headline numbers, final heads, cost predictions, figures, config."""
    from sinkscope.report.html import STYLE  # the analyze report's look
    headline = {k: summary[k] for k in (
        "final_step", "seconds", "loss", "bayes_loss", "excess_loss_noncopy", "copy_acc",
        "copy_head_wqk_nuc_over_fro", "copy_head_pred_nuclear",
        "first_step_copy_acc_0.9", "first_step_copy_head_bos_0.5", "first_step_copy_head_diag_0.5",
    )}
    images = "".join(
        f'<img src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}" alt="{p.stem}"><br>'
        for p in figures
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>sinkscope gBB lab run</title>
<style>{STYLE}pre{{font-size:11px;background:#f6f6f6;overflow-x:auto}}</style></head><body>
<h1>gBB lab run</h1>
<p>Every head's pattern on non-trigger queries (off = fraction of them switched off; docs/experiments.md):
<b>{html.escape(summary["heads_line"])}</b>.<br>
Copy head: layer {summary["copy_head"]["layer"]}, head {summary["copy_head"]["head"]}
({html.escape(summary["copy_head"]["pattern"])}); dominant switch head: layer {summary["switch_head"]["layer"]},
head {summary["switch_head"]["head"]} ({html.escape(summary["switch_head"]["pattern"])}).</p>
<h2>Headline</h2>{_table([headline])}
<h2>Final heads</h2>{_table(summary["heads"])}
<h2>Cost predictions (per unit margin, orthonormal embeddings; docs/experiments.md)</h2>{_table([summary["predictions"]])}
<h2>Curves</h2>{images}
<h2>Config</h2><pre>{html.escape(json.dumps(config.to_dict(), indent=2))}</pre>
</body></html>"""
    path.write_text(page, encoding="utf-8")
