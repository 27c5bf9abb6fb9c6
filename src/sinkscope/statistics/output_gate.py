"""Output gates as a statistic (Qwen3-Next; Qiu et al. 2025): how often each head's gate closes, and whether it
closes where the head sinks.

For query t of head h the gate value is `g_t = mean_c σ(g_{t,c})` over the head's channels (`capture.gate`; for a
one-scalar gate, the gate itself). Per head over queries t ≥ 1: `gate_mean` = mean g_t, `gate_off_frac` = share with
`g_t ≤ τ_g` (`GATE_TAU`), `gate_sink_agreement` = P(hard sink on BOS | gate off) and `gate_off_given_sink` =
P(gate off | hard sink), with the hard sink `A[t,0] ≥ 1 − δ` of the run. Cost per layer and block: a mean over
channels, two comparisons and four sums over (B, Q).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from torch import Tensor

from sinkscope.statistics.state import Sum
from sinkscope.statistics.statistic import QueryBlock, Statistic, Tables

GATE_TAU = 0.1
SUMS = ("gate", "off", "off_sink", "sink", "queries")


class OutputGates(Statistic):
    """Streaming gate statistics of `n_layers` × `n_heads` heads over windows of `seq_len` tokens. The current
    batch's gate values are a plain attribute per layer, set by `on_gate` (before the layer's rows) and cleared in
    `end_batch`."""

    name = "output_gate"

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, tau: float = GATE_TAU, device="cpu") -> None:
        super().__init__()
        self.seq_len, self.tau = seq_len, tau
        self.sums = {name: self.add_state(name, Sum((n_layers, n_heads), device)) for name in SUMS}
        self._gates: dict[int, Tensor] = {}

    def on_gate(self, layer: int, gates: Tensor) -> None:
        """σ(g) (B, H, T, dh) of one layer (`capture.gate.output_gate_hooks`)."""
        self._gates[layer] = gates.mean(-1)  # (B, H, T)

    def on_query_block(self, layer: int, rows: QueryBlock) -> None:
        gate = self._gates[layer][..., rows.start : rows.start + rows.hard_sink.shape[-1]]  # (B, H, Q)
        if rows.start == 0:  # t = 0 sees only BOS: no switch to make
            gate, sink = gate[..., 1:], rows.hard_sink[..., 1:]
        else:
            sink = rows.hard_sink
        off = gate <= self.tau
        for name, value in (("gate", gate.double()), ("off", off), ("off_sink", off & sink), ("sink", sink),
                            ("queries", gate.new_ones(gate.shape))):  # fmt: skip
            self.sums[name].add(value.double().sum((0, 2)), (layer,))

    def end_batch(self, batch_size: int) -> None:
        self._gates.clear()

    def compute(self, windows: int) -> Tables:
        sums = {name: state.value.cpu().numpy() for name, state in self.sums.items()}
        L, H = sums["gate"].shape
        ratio = lambda a, b: np.where(b > 0, a / np.where(b > 0, b, 1), math.nan)  # noqa: E731
        heads = pd.DataFrame({
            "layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
            "gate_mean": ratio(sums["gate"], sums["queries"]).flatten(),
            "gate_off_frac": ratio(sums["off"], sums["queries"]).flatten(),
            "gate_sink_agreement": ratio(sums["off_sink"], sums["off"]).flatten(),
            "gate_off_given_sink": ratio(sums["off_sink"], sums["sink"]).flatten(),
        })  # fmt: skip
        return Tables(heads=heads)
