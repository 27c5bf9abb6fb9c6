"""Per-window summary numbers of an analysis, for the comparison page's bootstrap intervals over windows.

The run's summary numbers are means over windows of a per-window value, so one row per window is all a bootstrap
needs. Window w's row (L layers, H heads, T tokens; `α^w_{l,h} = mean_t A[t,0]` of that window):

- `sink_rate` = mean_{l,h} [α^w_{l,h} > ε] (Gu et al.'s per-window sink rate; the run's `sink_rate` is its mean);
- `mean_sink_score` = mean_{l,h} α^w_{l,h}; `mean_diag_score` = mean_{l,h} mean_{t≥1} A[t,t];
- `mlp_like_frac` = mean_l of the share of queries t ≥ 1 at which every head is hard-sink or hard-diagonal;
- `tokens_hash` = `Σ_t (id_t · 31^t mod P) mod P`, P = 2³¹ − 1: two runs whose tables agree in it window by window
  read the same windows, and a comparison may resample them in pairs.

The state is `MAX_WINDOWS` rows whatever the corpus (windows past it are left out of the table, which says how
many it holds), so it never grows with the corpus.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.functional.patterns import key_scores_from_columns
from sinkscope.statistics.state import Sum
from sinkscope.statistics.statistic import Columns, QueryBlock, Statistic, Tables

MAX_WINDOWS = 4096  # 4096 × 6 float64: 192 kB of state
SUMS = ("seen", "sink_exceed", "sink", "diag", "mlp_like", "tokens_hash")
HASH_PRIME = 2**31 - 1


def tokens_hash(ids: Tensor) -> Tensor:
    """`Σ_t (id_t · 31^t mod P) mod P` of each window (B, T) → (B,) int64 (P = `HASH_PRIME`; exact in float64)."""
    return (ids.long().cpu() * _hash_powers(ids.shape[-1]) % HASH_PRIME).sum(-1) % HASH_PRIME


@functools.cache
def _hash_powers(length: int) -> Tensor:
    """`31^t mod P` for t < `length` (int64), made once per length (a tensor operation per position and batch
    would cost thousands of dispatches per batch at long T)."""
    return torch.tensor([pow(31, t, HASH_PRIME) for t in range(length)], dtype=torch.int64)


class WindowSummary(Statistic):
    """Per window (the first `MAX_WINDOWS`): the sums behind the summary table's sink rate, mean sink and
    diagonal scores and MLP-like share; `compute` gives the extra table `windows`."""

    name = "window_summary"
    stacked = True

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, epsilon: float, device="cpu") -> None:
        super().__init__()
        self.L, self.H, self.T, self.epsilon = n_layers, n_heads, seq_len, epsilon
        self.sums = {name: self.add_state(name, Sum((MAX_WINDOWS,), device)) for name in SUMS}
        self._keep = torch.empty(0, dtype=torch.bool)
        self._rows = torch.empty(0, dtype=torch.long)

    def begin_batch(self, ids: Tensor, window_ids: Tensor) -> None:
        window_ids = window_ids.to(self.sums["seen"].value.device)
        self._keep = window_ids < MAX_WINDOWS
        self._rows = window_ids[self._keep]
        self._add("seen", torch.ones(len(window_ids), dtype=torch.float64, device=window_ids.device))
        self._add("tokens_hash", tokens_hash(ids).to(window_ids.device))

    def _add(self, name: str, value: Tensor) -> None:  # value (..., B) per window of the batch, summed over layers
        if len(self._rows):
            value = value.reshape(-1, value.shape[-1]).sum(0) if value.dim() > 1 else value
            self.sums[name].add(value.double()[self._keep.to(value.device)].to(self._rows.device), (self._rows,))

    def on_columns(self, layer: int, columns: Columns) -> None:
        alpha = key_scores_from_columns(columns.columns)[..., 0]  # (..., B, H): α^w_{l,h}
        self._add("sink_exceed", (alpha > self.epsilon).sum(-1))
        self._add("sink", alpha.sum(-1))
        self._add("diag", columns.diagonal[..., 1:].mean(-1).sum(-1))  # Σ_h mean_{t≥1} A[t,t]

    def on_query_block(self, layer: int, rows: QueryBlock) -> None:
        self._add("mlp_like", (rows.hard_sink | rows.hard_diag).all(dim=-2).sum(-1))  # both false at t = 0

    def compute(self, windows: int) -> Tables:
        values = {name: state.value.cpu().numpy() for name, state in self.sums.items()}
        stored = np.flatnonzero(values["seen"] > 0)
        LH = self.L * self.H
        table = pd.DataFrame({
            "window": stored,
            "sink_rate": values["sink_exceed"][stored] / LH,
            "mean_sink_score": values["sink"][stored] / LH,
            "mean_diag_score": values["diag"][stored] / LH,
            "mlp_like_frac": values["mlp_like"][stored] / (self.L * (self.T - 1)),
            "tokens_hash": values["tokens_hash"][stored].astype(np.int64),
        })  # fmt: skip
        return Tables(extra={"windows": table})
