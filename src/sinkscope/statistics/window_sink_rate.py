"""Gu et al. 2025's sink rate, thresholded per window (SPEC §2): `mean_{w,l,h} [α^w_{l,h} > ε]`, and per key."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from sinkscope.functional.patterns import exceed_counts, key_scores_from_columns
from sinkscope.statistics.state import Sum
from sinkscope.statistics.statistic import Columns, Statistic, Tables


class WindowSinkRate(Statistic):
    """`exceed[e, l, h, k]` = windows with `α^w_{l,h,k} > ε_e`, for each threshold of `epsilons` (the first is the
    run's ε): one pass serves an ε sweep, and no per-window score outlives its batch. `compute` gives `sink_rate`
    per head (key 0), per layer (mean over its heads) and per (layer, position), and the summary's `sink_rate`
    and `sink_rates` (every ε)."""

    name = "window_sink_rate"
    stacked = True

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, epsilons: tuple[float, ...], device="cpu") -> None:
        super().__init__()
        self.epsilons = tuple(epsilons)
        self._thresholds = torch.tensor(epsilons, dtype=torch.float64, device=device)
        self.exceed = self.add_state("exceed", Sum((len(epsilons), n_layers, n_heads, seq_len), device))

    def on_columns(self, layer: int, columns: Columns) -> None:
        scores = key_scores_from_columns(columns.columns)  # (..., B, H, T): α^w_{l,h,k}
        self.exceed.add(exceed_counts(scores, self._thresholds.to(scores.device), dim=-3), (slice(None), layer))

    def compute(self, windows: int) -> Tables:
        rates = self.exceed.value.cpu() / windows  # (E, L, H, T): mean_w [α^w > ε_e]
        _, L, H, T = rates.shape
        heads = pd.DataFrame({
            "layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
            "sink_rate": rates[0, ..., 0].flatten().numpy(),
        })  # fmt: skip
        layers = pd.DataFrame({"layer": np.arange(L), "sink_rate": rates[0, ..., 0].mean(1).numpy()})
        positions = pd.DataFrame({
            "layer": np.repeat(np.arange(L), T), "position": np.tile(np.arange(T), L),
            "sink_rate": rates[0].mean(1).flatten().numpy(),
        })  # fmt: skip
        summary = {
            "sink_rate": float(rates[0, ..., 0].mean()),
            "sink_rates": {str(e): float(rates[i, ..., 0].mean()) for i, e in enumerate(self.epsilons)},
        }
        return Tables(heads=heads, layers=layers, positions=positions, summary=summary)
