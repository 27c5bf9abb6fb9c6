"""One evaluation of a lab model on a fixed gBB batch: the rows of `metrics.parquet` (SPEC §7).

One row per (layer, head). Model-level columns (losses, copy accuracy) repeat on every row of a step so the
table stays tidy: `step, layer, head` identify a row.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from sinkscope.synthetic.bigram_backcopy import GBBBatch
from sinkscope.synthetic.measures import (
    bayes_loss,
    copy_accuracy,
    excess_loss,
    first_token_norm,
    pattern_margins,
    pattern_masses,
    qk_norms,
    row_entropy,
    switch_off_frac,
    value_drain,
)
from sinkscope.synthetic.tiny_transformer import TinyTransformer

# Column order of metrics.parquet (documented in docs/experiments.md).
METRIC_COLUMNS = (
    "step", "layer", "head",
    "loss", "bayes_loss", "excess_loss", "excess_loss_noncopy", "copy_acc", "copy_loss",
    "bos_attn", "diag_attn", "prev_attn", "copy_attn", "entropy", "row_mass", "gate_plain", "gate_copy", "sink_logit",
    "switch_off", "sink_margin", "diag_margin", "value_drain", "bos_resid_norm", "bos_resid_ratio",
    "z_norm_sq", "wqk_nuclear", "wqk_frobenius",
)


@torch.no_grad()
def evaluate(model: TinyTransformer, batch: GBBBatch, step: int) -> list[dict[str, float | int]]:
    """Measure `model` on `batch` (SPEC §7 list): one dict per (layer, head) with `METRIC_COLUMNS` keys.

    `excess_loss_noncopy` is KL(oracle ‖ model) averaged over every position that is not a copy query
    ("elsewhere" in SPEC §7); `row_mass` is the mean attention row sum on non-trigger queries (1 for softmax,
    < 1 when a learned sink logit or ReLU attention lets the head attend to nothing); `gate_plain`/`gate_copy`
    the mean output gate on non-trigger/copy queries (NaN without gates); `switch_off` the fraction of
    non-trigger queries the head switches off (SPEC §3, `measures.switch_off_frac`); `z_norm_sq` the mean squared norm
    of the attention inputs, which sets the scale of W_QK (logits are z W_QK zᵀ).
    """
    was_training = model.training
    model.eval()
    logits, traces = model(batch.inputs)
    model.train(was_training)
    everywhere = torch.ones_like(batch.is_copy)
    ce = F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")  # (B, T)
    shared = {
        "step": step,
        "loss": float(ce.mean()),
        "bayes_loss": bayes_loss(batch.oracle, everywhere),
        "excess_loss": excess_loss(logits, batch.oracle, everywhere),
        "excess_loss_noncopy": excess_loss(logits, batch.oracle, ~batch.is_copy),
        "copy_acc": copy_accuracy(logits, batch),
        "copy_loss": float(ce[batch.is_copy].mean()),
    }
    rows = []
    for layer, (block, trace) in enumerate(zip(model.blocks, traces)):
        masses = pattern_masses(trace.probs, batch)
        margins = pattern_margins(trace.probs, batch)
        entropy = row_entropy(trace.probs, batch.is_plain)
        drain = value_drain(trace.values)
        off = switch_off_frac(trace.probs, trace.values, trace.gates, batch.is_plain)
        nuclear, frobenius = qk_norms(block.attn.w_qk())
        bos_norm, bos_ratio = first_token_norm(trace.resid)
        row_mass = trace.probs.sum(-1).transpose(0, 1)[:, batch.is_plain].mean(-1)  # (H,)
        z_norm_sq = float(trace.z.pow(2).sum(-1).mean())
        for head in range(trace.probs.shape[1]):
            gates = trace.gates[:, head] if trace.gates is not None else None
            sink_logit = block.attn.sink_logit
            rows.append({
                **shared,
                "layer": layer,
                "head": head,
                "bos_attn": float(masses["bos_attn"][head]),
                "diag_attn": float(masses["diag_attn"][head]),
                "prev_attn": float(masses["prev_attn"][head]),
                "copy_attn": float(masses["copy_attn"][head]),
                "entropy": float(entropy[head]),
                "row_mass": float(row_mass[head]),
                "gate_plain": float(gates[batch.is_plain].mean()) if gates is not None else math.nan,
                "gate_copy": float(gates[batch.is_copy].mean()) if gates is not None else math.nan,
                "sink_logit": float(sink_logit[head]) if sink_logit is not None else math.nan,
                "switch_off": float(off[head]),
                "sink_margin": float(margins["sink_margin"][head]),
                "diag_margin": float(margins["diag_margin"][head]),
                "value_drain": float(drain[head]),
                "bos_resid_norm": bos_norm,
                "bos_resid_ratio": bos_ratio,
                "z_norm_sq": z_norm_sq,
                "wqk_nuclear": float(nuclear[head]),
                "wqk_frobenius": float(frobenius[head]),
            })
    return [{name: row[name] for name in METRIC_COLUMNS} for row in rows]
