"""The closing numbers of a lab run: what the copy head does on non-trigger queries, and the W_QK costs
compared with the SPEC §7 vocabulary-level closed forms."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from sinkscope.functional.head_classes import HeadThresholds, classify_head
from sinkscope.theory.cost_closed_forms import gbb_diagonal_nuclear, gbb_sink_cost

if TYPE_CHECKING:
    from sinkscope.synthetic.config import RunConfig

# A head's pattern on non-trigger queries (`stats.head_classes.classify_head` on its masses there): "null" when its
# rows carry < 0.5 in total (learned sink logit, ReLU), "gated" when its mean output gate is < 0.5 (sigmoid gate),
# else "sink"/"diagonal"/"previous" when ≥ 0.5 of the row's mass is on position 0/the query itself/position t-k
# (the copy pattern kept on every query), else "dense" when the SPEC §2 entropy is ≥ 0.95 (close to uniform over
# the visible keys), else "mixed". analyze's classes use the same classifier with its own thresholds over all
# queries (sink score > ε = 0.3, entropy > 0.7).
LAB_THRESHOLDS = HeadThresholds(sink=0.5, diagonal=0.5, previous=0.5, dense=0.95, switched_off=0.5, inclusive=True)
SWITCH_PATTERNS = ("sink", "diagonal", "null", "gated")  # the ways a head can switch off on non-trigger queries
PATTERNS = (*SWITCH_PATTERNS, "previous", "dense", "mixed")

# Final per-head numbers kept in summary.json (columns of metrics.parquet).
HEAD_KEYS = (
    "bos_attn", "diag_attn", "prev_attn", "copy_attn", "entropy", "row_mass", "gate_plain", "gate_copy",
    "sink_logit", "switch_off", "value_drain", "bos_resid_ratio", "wqk_nuclear", "wqk_frobenius", "sink_margin",
    "diag_margin", "z_norm_sq",
)


def row_pattern(row: Any) -> str:
    """The lab's pattern of one metrics row (a namedtuple or Series with the metrics.parquet columns).

    The lab stores the previous-token class as "previous" (summary.json, regimes.parquet, the regime figures)."""
    pattern = classify_head(row.bos_attn, row.diag_attn, row.prev_attn, row.entropy, row_mass=row.row_mass,
                            gate=row.gate_plain, thresholds=LAB_THRESHOLDS)  # fmt: skip
    return "previous" if pattern == "previous-token" else pattern


def switch_strength(row: Any) -> float:
    """How completely a head switches off on non-trigger queries, whichever way: the largest of its BOS mass,
    diagonal mass, missing row mass `1 - row_mass` and closed gate `1 - gate` (0 for a uniform head)."""
    gate = 1 - row.gate_plain if math.isfinite(row.gate_plain) else 0.0
    return max(row.bos_attn, row.diag_attn, 1 - row.row_mass, gate)


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


def head_costs(row: Any, pattern: str, pred: dict[str, float]) -> dict[str, float]:
    """The head's `nuclear / Frobenius` ratio and its heuristic predicted nuclear norm for the pattern it uses:
    `κ · cost_per_kappa / mean ||z||²`, κ its observed median margin (logits are `z W zᵀ`, so a W on embeddings
    of squared norm r² needs 1/r² of the unit-norm cost); the diagonal's closed form for diagonal heads, the
    sink's otherwise. A heuristic: learned embeddings are not orthonormal, and the same W_QK also carries the
    copy pattern. NaN for patterns other than sink and diagonal."""
    ratio = float(row.wqk_nuclear / row.wqk_frobenius)
    if pattern not in ("sink", "diagonal"):  # no closed form for a dense, mixed or gated head
        return {"wqk_nuc_over_fro": ratio, "pred_nuclear": math.nan, "pred_nuc_over_fro": math.nan}
    diagonal = pattern == "diagonal"
    margin = row.diag_margin if diagonal else row.sink_margin
    per_kappa = pred["pred_diag_nuclear_per_kappa"] if diagonal else pred["pred_sink_nuclear_per_kappa"]
    return {
        "wqk_nuc_over_fro": ratio,
        "pred_nuclear": float(margin * per_kappa / row.z_norm_sq) if math.isfinite(margin) else math.nan,
        "pred_nuc_over_fro": pred["pred_diag_nuc_over_fro"] if diagonal else pred["pred_sink_nuc_over_fro"],
    }


def heads_line(heads: list[dict[str, Any]]) -> str:
    """Every head's final pattern in one line, e.g. `L0H0 sink (off 0.97), L1H0 dense`."""
    def one(h: dict[str, Any]) -> str:
        off = f" (off {h['switch_off']:.2f})" if h["switch_off"] >= 0.05 else ""
        return f"L{h['layer']}H{h['head']} {h['pattern']}{off}"
    return ", ".join(one(h) for h in heads)


def summarize(metrics: pd.DataFrame, config: RunConfig, seconds: float) -> dict[str, Any]:
    """Final model-level numbers, every head's final pattern, and the copy and switch heads' stories over time.

    The copy head is the (layer, head) with the largest final `copy_attn`; the (dominant) switch head the one
    with the largest final `switch_strength` (the head that best switches off on non-trigger queries). Each
    gets its `head_costs` against the SPEC §7 closed forms.
    """
    final_step = int(metrics["step"].max())
    final = metrics[metrics["step"] == final_step].reset_index(drop=True)
    heads = [
        {"layer": int(row.layer), "head": int(row.head), "pattern": row_pattern(row),
         "switch_strength": float(switch_strength(row)), **{k: float(getattr(row, k)) for k in HEAD_KEYS}}
        for row in final.itertuples()
    ]
    pred = cost_predictions(config.task.vocab_size, config.task.n_triggers)
    chosen = {}
    for role, index in (("copy_head", final["copy_attn"].idxmax()),
                        ("switch_head", max(range(len(heads)), key=lambda i: heads[i]["switch_strength"]))):
        row = final.loc[index]
        pattern = heads[index]["pattern"]
        chosen[role] = {"layer": int(row["layer"]), "head": int(row["head"]), "pattern": pattern}
        chosen[f"{role}_final"] = {k: float(row[k]) for k in HEAD_KEYS}
        chosen[f"{role}_costs"] = head_costs(row, pattern, pred)
    copy = chosen["copy_head"]
    history = metrics[(metrics["layer"] == copy["layer"]) & (metrics["head"] == copy["head"])].sort_values("step")
    first_model = metrics.drop_duplicates("step").sort_values("step")
    last = final.iloc[0]
    return _nan_to_none({
        "variant_config": config.to_dict(),
        "seconds": round(seconds, 1),
        "final_step": final_step,
        "loss": float(last["loss"]),
        "bayes_loss": float(last["bayes_loss"]),
        "excess_loss_noncopy": float(last["excess_loss_noncopy"]),
        "copy_acc": float(last["copy_acc"]),
        "heads_line": heads_line(heads),
        **chosen,
        "copy_head_wqk_nuc_over_fro": chosen["copy_head_costs"]["wqk_nuc_over_fro"],
        "copy_head_pred_nuclear": chosen["copy_head_costs"]["pred_nuclear"],
        "first_step_copy_acc_0.9": _first_step(first_model["step"], first_model["copy_acc"] >= 0.9),
        "first_step_copy_head_bos_0.5": _first_step(history["step"], history["bos_attn"] >= 0.5),
        "first_step_copy_head_diag_0.5": _first_step(history["step"], history["diag_attn"] >= 0.5),
        "predictions": pred,
        "heads": heads,
    })
