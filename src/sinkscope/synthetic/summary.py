"""The closing numbers of a lab run: what the copy head does on non-trigger queries, and the W_QK costs
compared with the SPEC §7 vocabulary-level closed forms."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from sinkscope.theory.cost_closed_forms import gbb_diagonal_nuclear, gbb_sink_cost

if TYPE_CHECKING:
    from sinkscope.synthetic.train import RunConfig

# A head's pattern on non-trigger queries: "null" when its rows carry < NULL_MASS in total (learned sink logit,
# ReLU), else "sink"/"diagonal"/"previous" when ≥ PATTERN_MASS of the row's mass is on position 0/the query
# itself/position t-k (the copy pattern kept on every query), else "dense" when the SPEC §2 entropy is
# ≥ DENSE_ENTROPY (close to uniform over the visible keys), else "mixed".
NULL_MASS = 0.5
PATTERN_MASS = 0.5
DENSE_ENTROPY = 0.95


def classify_pattern(bos_attn: float, diag_attn: float, prev_attn: float, row_mass: float, entropy: float) -> str:
    """The head's pattern on non-trigger queries from its mean masses and entropy (thresholds above)."""
    if row_mass < NULL_MASS:
        return "null"
    for name, mass in (("sink", bos_attn), ("diagonal", diag_attn), ("previous", prev_attn)):
        if mass >= PATTERN_MASS * row_mass:
            return name
    return "dense" if entropy >= DENSE_ENTROPY else "mixed"


def cost_predictions(vocab_size: int, n_triggers: int) -> dict[str, float]:
    """SPEC §7 costs per unit margin (κ = 1, orthonormal unit embeddings) and the nuclear/Frobenius ratios.

    The ratio nuclear/Frobenius needs no κ or embedding scale: 1 for the rank-1 sink, ≈ √N for the diagonal.
    """
    sink = gbb_sink_cost(vocab_size, n_triggers)
    diag = gbb_diagonal_nuclear(vocab_size, n_triggers)
    return {
        "pred_sink_nuclear_per_kappa": sink,
        "pred_diag_nuclear_per_kappa": diag,
        "pred_frobenius_per_kappa": sink,
        "pred_sink_nuc_over_fro": 1.0,
        "pred_diag_nuc_over_fro": diag / sink,
    }


def _nan_to_none(obj: Any) -> Any:
    """JSON has no NaN: measures that do not apply (gates without gating, ...) become null."""
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return None if isinstance(obj, float) and not math.isfinite(obj) else obj


def _first_step(steps: pd.Series, condition: pd.Series) -> int | None:
    hits = steps[condition]
    return int(hits.iloc[0]) if len(hits) else None


def summarize(metrics: pd.DataFrame, config: RunConfig, seconds: float) -> dict[str, Any]:
    """Final model-level numbers, every head's final pattern, and the copy head's story over time.

    The copy head is the (layer, head) with the largest final `copy_attn`. Its predicted W_QK nuclear norm
    for the pattern it uses is `κ · cost_per_kappa / mean ||z||²` with κ its observed median margin (logits are
    `z W zᵀ`, so a W on embeddings of squared norm r² needs 1/r² of the unit-norm cost); it is a heuristic
    (learned embeddings are not orthonormal, and the same W_QK also carries the copy pattern).
    """
    final_step = int(metrics["step"].max())
    final = metrics[metrics["step"] == final_step].reset_index(drop=True)
    heads = []
    for row in final.itertuples():
        heads.append({
            "layer": int(row.layer),
            "head": int(row.head),
            "pattern": classify_pattern(
                row.bos_attn, row.diag_attn, row.prev_attn, row.row_mass, row.entropy
            ),
            **{k: float(getattr(row, k)) for k in (
                "bos_attn", "diag_attn", "prev_attn", "copy_attn", "entropy", "row_mass", "gate_plain", "sink_logit",
                "value_drain", "bos_resid_ratio", "wqk_nuclear", "wqk_frobenius", "sink_margin", "diag_margin",
            )},
        })
    copy_row = final.loc[final["copy_attn"].idxmax()]
    layer, head = int(copy_row["layer"]), int(copy_row["head"])
    history = metrics[(metrics["layer"] == layer) & (metrics["head"] == head)].sort_values("step")
    pattern = classify_pattern(
        copy_row["bos_attn"], copy_row["diag_attn"], copy_row["prev_attn"], copy_row["row_mass"], copy_row["entropy"]
    )
    pred = cost_predictions(config.task.vocab_size, config.task.n_triggers)
    margin = copy_row["diag_margin"] if pattern == "diagonal" else copy_row["sink_margin"]
    per_kappa = pred["pred_diag_nuclear_per_kappa"] if pattern == "diagonal" else pred["pred_sink_nuclear_per_kappa"]
    first_model = metrics.drop_duplicates("step").sort_values("step")
    return _nan_to_none({
        "variant_config": config.to_dict(),
        "seconds": round(seconds, 1),
        "final_step": final_step,
        "loss": float(copy_row["loss"]),
        "bayes_loss": float(copy_row["bayes_loss"]),
        "excess_loss_noncopy": float(copy_row["excess_loss_noncopy"]),
        "copy_acc": float(copy_row["copy_acc"]),
        "copy_head": {"layer": layer, "head": head, "pattern": pattern},
        "copy_head_final": {k: float(copy_row[k]) for k in (
            "bos_attn", "diag_attn", "prev_attn", "copy_attn", "entropy", "row_mass", "gate_plain", "gate_copy",
            "sink_logit",
            "value_drain", "bos_resid_ratio", "wqk_nuclear", "wqk_frobenius", "sink_margin", "diag_margin",
            "z_norm_sq",
        )},
        "copy_head_wqk_nuc_over_fro": float(copy_row["wqk_nuclear"] / copy_row["wqk_frobenius"]),
        "copy_head_pred_nuclear": (
            float(margin * per_kappa / copy_row["z_norm_sq"]) if math.isfinite(margin) else math.nan
        ),
        "first_step_copy_acc_0.9": _first_step(first_model["step"], first_model["copy_acc"] >= 0.9),
        "first_step_copy_head_bos_0.5": _first_step(history["step"], history["bos_attn"] >= 0.5),
        "first_step_copy_head_diag_0.5": _first_step(history["step"], history["diag_attn"] >= 0.5),
        "predictions": pred,
        "heads": heads,
    })
