"""Per-window evidence for `sinkscope reproduce`'s bootstrap intervals: one row of sums per corpus window.

The analysis statistics pool over windows; a verdict's interval resamples windows, so this statistic keeps the
few sums each claim needs *per window* (its state is `n_windows` rows, fixed by the caller, so it never grows
with the corpus beyond the windows a reproduction asks for). Window w's row:

- `nonpos` (L,): count of t ≥ 1 with `cos(z_0, z_t) ≤ 0` (SPEC §4, attention input z); `nonpos_control` (L,):
  the same with a random context token `z_r` (r drawn per window, seeded) in place of BOS, over t ≥ 1, t ≠ r;
- `switch` (S, 4): the SPEC §3 2×2 table pooled over heads, at τ · `TAU_SCALES` (hard sink at the feed's δ):
  counts of (off, sink), (off, no sink), (on, sink), (on, no sink) over queries t ≥ 1;
- `drain` (L, KV): value drain `||v_0|| / mean_{j≥1} ||v_j||` per key/value head (GQA groups share values);
- `hard_sink` (L, H): count of hard-sink queries; `mlp_like` (L,): count of queries on which every head is
  hard-sink or hard-diagonal; `sink_column` (L, H): `Σ_t A[t,0]` (the window's sink score times T).
"""

from __future__ import annotations

import torch
from torch import Tensor

from sinkscope.functional.geometry import bos_cosine
from sinkscope.functional.switch import switched_off, value_drain
from sinkscope.statistics.state import Sum
from sinkscope.statistics.statistic import Columns, QueryBlock, Statistic, Tables

TAU_SCALES = (0.5, 1.0, 2.0)  # the switch table at half, once and double τ (threshold sensitivity)
SWITCH_CELLS = ("off_sink", "off_nosink", "on_sink", "on_nosink")


def control_positions(window_ids: Tensor, seq_len: int, seed: int) -> Tensor:
    """The random context position r ∈ [1, T-1] of each window (seeded by `seed` and the window's index)."""
    draws = [torch.randint(1, seq_len, (1,), generator=torch.Generator().manual_seed(seed * 7919 + int(w)))
             for w in window_ids.cpu()]  # fmt: skip
    return torch.cat(draws)


class WindowEvidence(Statistic):
    """The per-window sums listed in the module docstring, for windows 0..n_windows-1 of a single process."""

    name = "window_evidence"

    def __init__(self, n_layers: int, n_heads: int, group: int, seq_len: int, n_windows: int, tau: float,
                 seed: int = 0) -> None:  # fmt: skip
        super().__init__()
        L, H, W = n_layers, n_heads, n_windows
        self.seq_len, self.tau, self.seed, self.group = seq_len, tau, seed, group
        self.sums = {
            "nonpos": self.add_state("nonpos", Sum((W, L))),
            "nonpos_control": self.add_state("nonpos_control", Sum((W, L))),
            "switch": self.add_state("switch", Sum((W, len(TAU_SCALES), len(SWITCH_CELLS)))),
            "drain": self.add_state("drain", Sum((W, L, H // group))),
            "hard_sink": self.add_state("hard_sink", Sum((W, L, H))),
            "mlp_like": self.add_state("mlp_like", Sum((W, L))),
            "sink_column": self.add_state("sink_column", Sum((W, L, H))),
        }
        self._windows = torch.empty(0, dtype=torch.long)
        self._control = torch.empty(0, dtype=torch.long)
        self._value_norms: dict[int, Tensor] = {}

    def begin_batch(self, ids: Tensor, window_ids: Tensor) -> None:
        self._windows = window_ids.cpu()
        self._control = control_positions(self._windows, self.seq_len, self.seed)

    def _add(self, name: str, value: Tensor, layer: int | None = None) -> None:
        index = (self._windows,) if layer is None else (self._windows, layer)
        self.sums[name].add(value.cpu(), index)

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        self._add("nonpos", (bos_cosine(z) <= 0).sum(-1).double(), layer)
        unit = z.float() / z.float().norm(dim=-1, keepdim=True).clamp_min(1e-30)  # (B, T, d)
        r = self._control.to(z.device)
        anchor = unit[torch.arange(len(r), device=z.device), r]  # (B, d)
        cos = (unit[:, 1:] @ anchor[:, :, None]).squeeze(-1)  # (B, T-1): t = 1..T-1
        others = torch.arange(1, z.shape[1], device=z.device)[None, :] != r[:, None]
        self._add("nonpos_control", ((cos <= 0) & others).sum(-1).double(), layer)

    def on_values(self, layer: int, value_norms: Tensor) -> None:
        self._value_norms[layer] = value_norms
        self._add("drain", value_drain(value_norms[:, :: self.group]).double(), layer)  # (B, KV)

    def on_query_block(self, layer: int, rows: QueryBlock) -> None:
        Q = rows.out_norms.shape[-1]
        queries = torch.arange(rows.start, rows.start + Q, device=rows.out_norms.device)
        valid = (queries >= 1).view(1, 1, Q)
        sink = rows.hard_sink & valid
        cells = []
        for scale in TAU_SCALES:
            off = switched_off(rows.out_norms, self._value_norms[layer], self.tau * scale, rows.start) & valid
            on = ~off & valid
            cells.append(torch.stack([(a & b).sum((1, 2)) for a, b in ((off, sink), (off, ~sink), (on, sink),
                                                                        (on, ~sink))], -1))  # fmt: skip
        self._add("switch", torch.stack(cells, 1).double())  # (B, S, 4)
        self._add("hard_sink", sink.sum(-1).double(), layer)
        every = ((rows.hard_sink | rows.hard_diag).all(dim=1) & (queries >= 1)).sum(-1)  # (B,)
        self._add("mlp_like", every.double(), layer)

    def on_columns(self, layer: int, columns: Columns) -> None:
        self._add("sink_column", columns.columns[..., 0], layer)

    def end_batch(self, batch_size: int) -> None:
        self._value_norms.clear()

    def arrays(self) -> dict[str, Tensor]:
        """The per-window sums, `{name: (W, ...) float64}`."""
        return {name: state.value.clone() for name, state in self.sums.items()}

    def compute(self, windows: int) -> Tables:
        """No table columns: the reproduction reads `arrays()` (the rows are not a per-head or per-layer table)."""
        return Tables()
