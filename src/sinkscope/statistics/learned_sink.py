"""Learned sinks (gpt-oss's `s_aux`): how much of each head's attention its learned sink column takes, beside BOS.

Registered for families with a learned sink. Per head: `learned_sink_score` = mean_t m_t, `learned_sink_rate` =
mean_w [mean_t m^w_t > ε] (Gu et al.'s per-window rate with the learned sink in place of BOS),
`hard_learned_sink_frac` (queries t ≥ 1 with m_t ≥ 1-δ), and the switch table's queries that are off because of
the learned sink: `switch_n_off_learned_sink`, `switch_learned_agreement` = P(hard learned sink | off) and
`switch_any_sink_agreement` = P(hard sink on BOS or on the learned sink | off). Per layer: `learned_sink_rate` and
`mlp_like_frac_learned` (queries at which every head is a hard sink, a hard learned sink or a hard diagonal).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from torch import Tensor

from sinkscope.functional.learned_sink import learned_sink_block_sums
from sinkscope.statistics.state import Sum
from sinkscope.statistics.statistic import QueryBlock, Statistic, Tables

SUMS = ("mass", "hard", "n_off", "n_off_learned", "n_off_any_sink", "rate")


class LearnedSinkScores(Statistic):
    """Streaming learned-sink statistics of `n_layers` × `n_heads` heads over windows of `seq_len` tokens, with the
    run's ε (rate), δ (hard) and τ (switch). The value norms and the per-window mass of the current batch are plain
    attributes, cleared in `end_batch`."""

    name = "learned_sink"

    def __init__(
        self, n_layers: int, n_heads: int, seq_len: int, epsilon: float, delta: float, tau: float, device="cpu"
    ) -> None:
        super().__init__()
        self.seq_len, self.epsilon, self.delta, self.tau = seq_len, epsilon, delta, tau
        self.sums = {name: self.add_state(name, Sum((n_layers, n_heads), device)) for name in SUMS}
        self.silent = self.add_state("silent", Sum((n_layers,), device))
        self._value_norms: dict[int, Tensor] = {}
        self._window_mass: dict[int, Tensor] = {}

    def on_values(self, layer: int, value_norms: Tensor) -> None:
        self._value_norms[layer] = value_norms

    def on_query_block(self, layer: int, rows: QueryBlock) -> None:
        if rows.learned_sink is None:
            return
        mass = rows.learned_sink
        sums, silent = learned_sink_block_sums(mass, rows.out_norms, self._value_norms[layer], rows.hard_sink,
                                               rows.hard_diag, rows.start, self.delta, self.tau)  # fmt: skip
        for name, value in sums.items():
            self.sums[name].add(value, (layer,))
        self.silent.add(silent.sum(), (layer,))
        window = mass.double().sum(-1)  # (B, H): this block's part of Σ_t m^w_t
        self._window_mass[layer] = window if rows.start == 0 else self._window_mass[layer] + window
        if rows.start + mass.shape[-1] == self.seq_len:  # the layer's last block: threshold each window's score
            score = self._window_mass.pop(layer) / self.seq_len
            self.sums["rate"].add((score > self.epsilon).double().sum(0), (layer,))

    def end_batch(self, batch_size: int) -> None:
        self._value_norms.clear()
        self._window_mass.clear()

    def compute(self, windows: int) -> Tables:
        W, T = windows, self.seq_len
        sums = {name: state.value.cpu() for name, state in self.sums.items()}
        L, H = sums["mass"].shape
        rows = []
        for layer in range(L):
            for head in range(H):
                n_off = float(sums["n_off"][layer, head])
                rows.append({
                    "layer": layer,
                    "head": head,
                    "learned_sink_score": float(sums["mass"][layer, head]) / (W * T),
                    "learned_sink_rate": float(sums["rate"][layer, head]) / W,
                    "hard_learned_sink_frac": float(sums["hard"][layer, head]) / (W * (T - 1)),
                    "switch_n_off_learned_sink": int(sums["n_off_learned"][layer, head]),
                    "switch_learned_agreement": float(sums["n_off_learned"][layer, head]) / n_off if n_off else math.nan,
                    "switch_any_sink_agreement": float(sums["n_off_any_sink"][layer, head]) / n_off if n_off else math.nan,
                })  # fmt: skip
        layers = pd.DataFrame({
            "layer": np.arange(L),
            "learned_sink_rate": (sums["rate"] / W).mean(1).numpy(),
            "mlp_like_frac_learned": (self.silent.value.cpu() / (W * (T - 1))).numpy(),
        })  # fmt: skip
        return Tables(heads=pd.DataFrame(rows), layers=layers)
