"""Attention switches (SPEC §3): value drain, AHON, the switched-off × hard-sink 2×2 counts, MLP-like layers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.functional.patterns import later_queries
from sinkscope.functional.switch import finalize_switch, switch_block_sums, value_drain
from sinkscope.statistics.state import Sum
from sinkscope.statistics.statistic import QueryBlock, Statistic, Tables

COUNTS = ("n_off_sink", "n_off_nosink", "n_on_sink", "n_on_nosink")


class SwitchCounts(Statistic):
    """Per head: Σ_w value drain, Σ ||o_t|| (AHON) and the counts of queries t ≥ 1 switched off (`||o_t|| ≤ τ
    mean_{j≤t} ||v_j||`, the keys query t sees) or on, with or without a hard sink; per layer: queries where every head is a hard sink or a
    hard diagonal (the layer acts like an MLP). The value norms of a layer live for its batch only."""

    name = "switch_counts"
    stacked = True

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, tau: float, device="cpu") -> None:
        super().__init__()
        self.seq_len, self.tau = seq_len, tau
        self.sums = {name: self.add_state(name, Sum((n_layers, n_heads), device)) for name in ("value_drain", "ahon", *COUNTS)}
        self.mlp_like = self.add_state("mlp_like", Sum((n_layers,), device))
        self._value_norms: dict[int, Tensor] = {}

    def on_values(self, layer: int, value_norms: Tensor) -> None:
        self._value_norms[layer] = value_norms
        self.sums["value_drain"].add(value_drain(value_norms).sum(-2), (layer,))

    def on_query_block(self, layer: int, rows: QueryBlock) -> None:
        sums = switch_block_sums(rows.out_norms, self._value_norms[layer], rows.hard_sink, rows.start, self.tau)
        for name, value in sums.items():
            self.sums[name].add(value, (layer,))
        queries = later_queries(rows.start, rows.out_norms.shape[-1], str(rows.out_norms.device))  # t ≥ 1
        every_head = (rows.hard_sink | rows.hard_diag).all(dim=-2) & queries  # (..., B, Q)
        self.mlp_like.add(every_head.sum((-2, -1), dtype=torch.float64), (layer,))

    def end_batch(self, batch_size: int) -> None:
        self._value_norms.clear()

    def compute(self, windows: int) -> Tables:
        W, T = windows, self.seq_len
        sums = {name: state.value.cpu() for name, state in self.sums.items()}
        L, H = sums["ahon"].shape
        rows = []
        for layer in range(L):
            switch = finalize_switch({k: v[layer] for k, v in sums.items()}, W, T)
            for head in range(H):
                row = {"layer": layer, "head": head} | {k: float(v[head]) for k, v in switch.items()}
                rows.append(row | {f"switch_{k}": int(sums[k][layer, head]) for k in COUNTS})
        layers = pd.DataFrame({"layer": np.arange(L), "mlp_like_frac": (self.mlp_like.value.cpu() / (W * (T - 1))).numpy()})
        return Tables(heads=pd.DataFrame(rows), layers=layers)
