"""One evaluation of a lab model on a fixed gBB batch: the rows of `metrics.parquet` (SPEC §7).

One row per (layer, head). Model-level columns (losses, copy accuracy) repeat on every row of a step so the
table stays tidy: `step, layer, head` identify a row.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch.nn import functional as F

from sinkscope.functional.geometry import bos_norm_ratio
from sinkscope.functional.patterns import diag_score, entropy_score, prev_score, sink_score
from sinkscope.functional.query_mask import masked_query_mean
from sinkscope.functional.switch import value_drain
from sinkscope.synthetic.bigram_backcopy import GBBBatch, GBBTask
from sinkscope.synthetic.config import RunConfig
from sinkscope.synthetic.measures import (
    bayes_loss,
    copy_accuracy,
    copy_attention,
    excess_loss,
    pattern_margins,
    qk_norms,
    switch_off_frac,
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

    `bos_attn`, `diag_attn`, `entropy`: the SPEC §2 sink score, diagonal score and row entropy over non-trigger
    queries (`batch.is_plain` as the query mask, pooled over the batch); `prev_attn` the previous-token score at
    the copy offset k, `A[t, t-k]` on non-trigger queries t ≥ k (the copy pattern where no copy is due);
    `copy_attn` the same on copy queries (`measures.copy_attention`); `value_drain` and `bos_resid_ratio` the
    SPEC §3/§4 per-window values averaged over windows; `bos_resid_norm` the mean `||h_0||`.
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
        probs, plain = trace.probs, batch.is_plain  # (B, H, T, T), (B, T)
        masses = {
            "bos_attn": sink_score(probs, plain),
            "diag_attn": diag_score(probs, plain),
            "prev_attn": prev_score(probs, plain, offset=batch.copy_offset),
            "copy_attn": copy_attention(probs, batch),
        }
        margins = pattern_margins(probs, batch)
        # rows that do not sum to 1 (sink logit, ReLU) are renormalised: entropy of where the head does attend
        entropy = entropy_score(probs / probs.sum(-1, keepdim=True).clamp_min(1e-30), plain)
        drain = value_drain(trace.values.norm(dim=-1)).mean(0)  # (H,)
        off = switch_off_frac(probs, trace.values, trace.gates, plain)
        nuclear, frobenius = qk_norms(block.attn.w_qk())
        bos_norm = float(trace.resid.norm(dim=-1)[:, 0].mean())
        bos_ratio = float(bos_norm_ratio(trace.resid).mean())
        row_mass = masked_query_mean(probs.sum(-1), plain)  # (H,)
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


def evaluation_probe(config: dict) -> dict:
    """The run's evaluation batch as a probe: `eval_batch_size` gBB sequences from seed `train.seed + 1` (as
    `train_bb` samples it), with the sha256 of its token ids (int64, row-major)."""
    run = RunConfig.from_dict({k: config[k] for k in ("task", "model", "train")})
    batch = GBBTask.from_config(run.task).sample(run.train.eval_batch_size,
                                                 torch.Generator().manual_seed(run.train.seed + 1))  # fmt: skip
    ids = batch.inputs.to(torch.int64).contiguous().numpy()
    return {"source": f"gBB evaluation batch (seed {run.train.seed + 1}, {'BOS' if run.task.bos else 'no BOS'})",
            "seq_len": int(ids.shape[1]), "windows": int(ids.shape[0]),
            "sha256": hashlib.sha256(ids.tobytes()).hexdigest()}  # fmt: skip
