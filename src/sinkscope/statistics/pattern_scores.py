"""Per-head pattern scores (SPEC §2): sink, diagonal, previous-token, entropy, hard fractions, per-position α_k."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from sinkscope.errors import SinkscopeError
from sinkscope.functional.head_classes import HeadThresholds
from sinkscope.functional.patterns import finalize_pattern_scores, head_class
from sinkscope.statistics.state import Sum
from sinkscope.statistics.statistic import Columns, QueryBlock, Statistic, Tables

ROW_SUMS = ("sink", "diag", "prev", "entropy", "hard_sink", "hard_diag", "upper_mass", "row_total", "learned_sink")


class PatternScores(Statistic):
    """Sums over queries of `A[t,0]`, `A[t,t]`, `A[t,t−1]`, weighted row entropy and the hard fractions (per head),
    and the column sums `Σ_w Σ_t A[t,k]` (per head and key). `compute` gives the means of SPEC §2, the head class
    at `epsilon`, the positions table's `α_k` columns (`mean_key_score`, `max_key_score`, `sink_rate_of_mean`)
    and the layers' `sink_rate_of_mean` (`thresholds`: the head-class thresholds, default those of `head_class`);
    it refuses maps that are not a causal softmax (row sums, upper mass)."""

    name = "pattern_scores"
    stacked = True

    def __init__(
        self, n_layers: int, n_heads: int, seq_len: int, epsilon: float, device="cpu",
        thresholds: HeadThresholds | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        L, H, T = n_layers, n_heads, seq_len
        self.seq_len, self.epsilon, self.thresholds = seq_len, epsilon, thresholds  # None: the defaults at epsilon
        self.sums = {name: self.add_state(name, Sum((L, H), device)) for name in ROW_SUMS}
        self.keys = self.add_state("keys", Sum((L, H, T), device))

    def on_query_block(self, layer: int, rows: QueryBlock) -> None:
        for name, value in rows.sums.items():  # the rows and fused paths have no `upper_mass`: causal by construction
            self.sums[name].add(value, (layer,))

    def on_columns(self, layer: int, columns: Columns) -> None:
        self.keys.add(columns.columns.sum(-3), (layer,))

    def compute(self, windows: int) -> Tables:
        W, T = windows, self.seq_len
        sums = {name: state.value.cpu() for name, state in self.sums.items()} | {"keys": self.keys.value.cpu()}
        # With a learned sink (gpt-oss) each row of A sums to 1 − m_t: the sink column completes it.
        seen = sums["row_total"].sum(-1) > 0  # layers without a softmax map (linear attention) have no rows
        row_error = ((sums["row_total"] + sums["learned_sink"]) / (W * T) - 1)[seen].abs().max().item() if seen.any() else 0.0
        upper = sums["upper_mass"].max().item() / (W * T)
        if row_error > 1e-4 or upper > 1e-6:
            raise SinkscopeError(
                f"captured attention is not a causal softmax (row-sum error {row_error:.2e}, mass above the "
                f"diagonal {upper:.2e}): the model's attention mask was not applied; please report this model"
            )
        L, H = sums["sink"].shape
        rows = []
        for layer in range(L):
            scores = finalize_pattern_scores({k: v[layer] for k, v in sums.items()}, W, T)
            for head in range(H):
                row = {"layer": layer, "head": head}
                row |= {k: float(v[head]) for k, v in scores.items() if k != "key_scores"}
                learned = float(sums["learned_sink"][layer, head]) / (W * T)  # the learned-sink score, 0 without one
                row["head_class"] = head_class(
                    row["sink_score"], row["diag_score"], row["prev_score"], row["entropy"], self.epsilon, learned,
                    thresholds=self.thresholds,
                )
                rows.append(row)
        heads = pd.DataFrame(rows)
        layers = pd.DataFrame({
            "layer": np.arange(L),
            "sink_rate_of_mean": heads.groupby("layer")["sink_score"].apply(lambda s: float((s > self.epsilon).mean())).values,
        })  # fmt: skip
        key_scores = sums["keys"] / (torch.arange(T, 0, -1, dtype=torch.float64) * W)  # (L, H, T): α_k
        positions = pd.DataFrame({
            "layer": np.repeat(np.arange(L), T),
            "position": np.tile(np.arange(T), L),
            "sink_rate_of_mean": (key_scores > self.epsilon).double().mean(1).flatten().numpy(),
            "mean_key_score": key_scores.mean(1).flatten().numpy(),
            "max_key_score": key_scores.amax(1).flatten().numpy(),
        })  # fmt: skip
        return Tables(heads=heads, layers=layers, positions=positions)
