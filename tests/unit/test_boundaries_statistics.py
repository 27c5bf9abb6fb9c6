"""Streaming statistics at their cuts and over axes of different lengths: output gates over two query blocks (t = 0
left out only in the first) with gates exactly at τ, and massive activations over (B, T, d) = (2, 4, 3) with ties
between BOS and the rest and between batches, and the histogram median where the cumulative count reaches exactly
half.

Expected values are loops over indices written here, or worked out by hand. Each test names in its docstring the
one-line bug it was seen to fail on."""

import math

import numpy as np
import pytest
import torch

from sinkscope.statistics.massive_activations import (
    BINS_PER_OCTAVE,
    LOG2_RANGE,
    MassiveActivations,
    magnitude_median,
)
from sinkscope.statistics.output_gate import OutputGates
from sinkscope.statistics.statistic import QueryBlock

L, B, H, T = 2, 2, 3, 5


def _block(start: int, hard_sink: torch.Tensor) -> QueryBlock:
    empty = torch.zeros_like(hard_sink)
    return QueryBlock(start=start, sums={}, hard_sink=hard_sink, hard_diag=empty, out_norms=empty.float())


def test_output_gates_over_two_blocks_count_a_gate_at_tau_as_off_and_leave_out_t0():
    """Gates (B, H, T, dh) = (2, 3, 5, 4) whose channel means are multiples of 1/8 (exact in float32), a quarter of
    them exactly τ = 0.25; blocks of queries 0–2 and 3–4. Per (layer, head) over t ≥ 1, by loop: mean gate, share
    off (g ≤ τ), P(sink | off), P(off | sink). Killed by `off = gate <= self.tau` → `gate < self.tau`, by
    `gate[..., 1:], rows.hard_sink[..., 1:]` → `gate, rows.hard_sink` (t = 0 counted) and by
    `[..., rows.start : rows.start + rows.hard_sink.shape[-1]]` → `[..., : rows.hard_sink.shape[-1]]`."""
    generator = torch.Generator().manual_seed(7)
    stat = OutputGates(L, H, T, tau=0.25)
    expected = {}
    for layer in range(L):
        means = torch.randint(0, 5, (B, H, T), generator=generator).float() / 8  # 0, 1/8, …, 1/2
        spread = torch.tensor([-1.0, 1.0, -3.0, 3.0]) / 64  # adds nothing to a channel mean
        gates = means[..., None] + spread
        sink = torch.randint(0, 2, (B, H, T), generator=generator).bool()
        sink[..., 0] = False
        stat.on_gate(layer, gates)
        stat.on_query_block(layer, _block(0, sink[..., :3]))
        stat.on_query_block(layer, _block(3, sink[..., 3:]))
        for h in range(H):
            g = [float(means[b, h, t]) for b in range(B) for t in range(1, T)]
            s = [bool(sink[b, h, t]) for b in range(B) for t in range(1, T)]
            off = [x <= 0.25 for x in g]
            both = sum(o and k for o, k in zip(off, s))
            expected[(layer, h)] = (sum(g) / len(g), sum(off) / len(g), both / sum(off) if any(off) else math.nan,
                                    both / sum(s) if any(s) else math.nan)  # fmt: skip
    stat.end_batch(B)
    heads = stat.compute(B).heads.set_index(["layer", "head"])
    for key, (mean, off, agreement, given_sink) in expected.items():
        row = heads.loc[key]
        assert row["gate_mean"] == pytest.approx(mean) and row["gate_off_frac"] == pytest.approx(off)
        assert row["gate_sink_agreement"] == pytest.approx(agreement, nan_ok=True)
        assert row["gate_off_given_sink"] == pytest.approx(given_sink, nan_ok=True)
    assert 0 < heads["gate_off_frac"].mean() < 1


def _layer_input(seed: int) -> torch.Tensor:
    """(B, T, d) = (2, 4, 3) with the distinct magnitudes 1..24 in a seeded order and alternating signs."""
    magnitudes = torch.randperm(24, generator=torch.Generator().manual_seed(seed)).float() + 1
    signs = torch.tensor([1.0, -1.0]).repeat(12)
    return (magnitudes * signs).reshape(2, 4, 3)


def test_massive_activations_per_channel_over_windows_and_positions():
    """Per layer, by loop over (b, t, c): BOS max max_b |h[b,0,c]|, rest max over t ≥ 1 with the position t of its
    first occurrence in (b, t) order, the largest entry's channel and position (0 when BOS ties the rest). Layer 1
    has channel 2's BOS equal to its rest max: it counts as on BOS. Killed by `self._rest_positions = T - 1` →
    `self._rest_positions = T` (positions of window 1 read as b·T), by `np.where(bos >= rest, 0, rest_position)` →
    `np.where(bos > rest, …)` and by `magnitude[:, 0].amax(0)` → `magnitude[:, 0].amax(1)`."""
    first, second = _layer_input(0), _layer_input(1)
    second[1, 0, 2] = 30.0  # BOS of window 1, channel 2 …
    second[0, 2, 2] = -30.0  # … ties the rest's largest (|−30|) at t = 2
    stat = MassiveActivations(L, 3)
    for layer, h in enumerate((first, second)):
        stat.on_layer_input(layer, h, h)
    stat.end_batch(B)
    layers = stat.compute(B).layers.set_index("layer")
    for layer, h in enumerate((first, second)):
        bos = [max(abs(float(h[b, 0, c])) for b in range(2)) for c in range(3)]
        rest, where = [], []
        for c in range(3):
            cells = [(abs(float(h[b, t, c])), t) for b in range(2) for t in range(1, 4)]
            top = max(value for value, _ in cells)
            rest.append(top)
            where.append(next(t for value, t in cells if value == top))
        largest = [max(x, y) for x, y in zip(bos, rest)]
        channel = int(np.argmax(largest))
        row = layers.loc[layer]
        assert row["massive_max"] == largest[channel] and row["massive_channel"] == channel
        assert row["massive_position"] == (0 if bos[channel] >= rest[channel] else where[channel])
        assert row["massive_bos_max"] == max(bos) and row["massive_rest_max"] == max(rest)
        assert row["massive_on_bos"] == (max(bos) >= max(rest))
    assert layers.loc[1, "massive_max"] == 30.0 and layers.loc[1, "massive_position"] == 0
    assert bool(layers.loc[1, "massive_on_bos"])
    top = stat.compute(B).extra["massive_activations"]
    assert top[top["layer"] == 0]["position"].tolist() != [0] * 3  # some channel's largest entry is past BOS


def test_massive_activations_keep_the_first_position_of_a_tie_across_batches():
    """Batch 1 puts the largest |h| of channel 0 (t ≥ 1) at t = 2, batch 2 an equal one at t = 3 and a smaller one
    elsewhere: the position stays 2; a larger one at t = 1 in batch 3 moves it. Killed by `larger = value >
    self.value[index]` → `larger = value >= self.value[index]`."""
    stat = MassiveActivations(1, 1)
    for t_max, value in ((2, 5.0), (3, 5.0), (1, 6.0)):
        h = torch.ones(2, 4, 1)
        h[1, t_max, 0] = -value
        stat.on_layer_input(0, h, h)
        stat.end_batch(2)
        if value == 5.0:
            assert stat.compute(2).layers.loc[0, "massive_position"] == 2
    assert stat.compute(6).layers.loc[0, "massive_position"] == 1


def test_histogram_median_at_exactly_half_the_count():
    """Counts 2 in bin 100 and 2 in bin 200 (4 in all): the cumulative count reaches half (2) at bin 100, whose
    geometric centre is 2^(−20 + 100.5/8); with 3 in bin 200 half is 2.5, reached at bin 200. A layer with no entry:
    NaN. Killed by `cumulative >= total / 2` → `cumulative > total / 2` and by `(index + 0.5)` → `(index + 1)`."""
    bins = int((LOG2_RANGE[1] - LOG2_RANGE[0]) * BINS_PER_OCTAVE)
    counts = np.zeros((3, bins))
    counts[0, [100, 200]] = 2
    counts[1, 100], counts[1, 200] = 2, 3
    median = magnitude_median(counts)
    assert median[0] == 2.0 ** (-20 + 100.5 / 8)
    assert median[1] == 2.0 ** (-20 + 200.5 / 8)
    assert math.isnan(median[2])


def _columns(seed: int, batch: int, heads: int, seq: int) -> torch.Tensor:
    """Column sums c_k = Σ_{t≥k} A[t,k] of `batch` windows × `heads` heads of random causal rows (float64)."""
    a = (torch.rand(batch, heads, seq, seq, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
         + 0.05).tril()  # fmt: skip
    return (a / a.sum(-1, keepdim=True)).sum(-2)


def test_window_sink_rate_over_epsilons_layers_heads_and_positions():
    """(E, L, H, T) = (2, 2, 4, 5) counts over W = 3 windows, by loop over α^w_{l,h,k} = c_k / (T − k) > ε_e; a
    window whose α^w at key 0 equals ε exactly (c_0 = 1.5, T = 5: α = 0.3) is not a sink. Heads: rate at key 0;
    layers: mean over heads; positions: mean over heads per key; summary: mean over layers and heads per ε. Killed
    by `rates[0, ..., 0].mean(1)` → `rates[0, ..., 1].mean(1)`, by `rates[i, ..., 0]` → `rates[0, ..., 0]` (one ε
    for all), by `exceed_counts(scores, …, dim=-3)` → `dim=-2` (counting heads instead of windows) and by passing
    `self._thresholds - 1e-12` (equality counted)."""
    from sinkscope.statistics.statistic import Columns
    from sinkscope.statistics.window_sink_rate import WindowSinkRate

    W, Hs, epsilons = 3, 4, (0.3, 0.2)
    stat = WindowSinkRate(L, Hs, T, epsilons)
    columns = [_columns(10 + layer, W, Hs, T) for layer in range(L)]
    columns[0][1, 2, 0] = 1.5  # α = 1.5 / 5 = 0.3 = ε: not above it
    for layer in range(L):
        stat.on_columns(layer, Columns(columns[layer], torch.zeros(W, Hs, T, dtype=torch.float64)))
    tables = stat.compute(W)
    rate = np.zeros((len(epsilons), L, Hs, T))
    for e, epsilon in enumerate(epsilons):
        for layer, h, k in np.ndindex(L, Hs, T):
            rate[e, layer, h, k] = sum(float(columns[layer][w, h, k]) / (T - k) > epsilon for w in range(W)) / W
    assert rate[0, 0, 2, 0] < 1  # the window at equality did not count
    heads = tables.heads.set_index(["layer", "head"])["sink_rate"]
    assert heads.to_dict() == pytest.approx({(layer, h): rate[0, layer, h, 0] for layer, h in np.ndindex(L, Hs)})
    assert tables.layers["sink_rate"].tolist() == pytest.approx([rate[0, layer, :, 0].mean() for layer in range(L)])
    positions = tables.positions.set_index(["layer", "position"])["sink_rate"]
    assert positions.to_dict() == pytest.approx({(layer, k): rate[0, layer, :, k].mean()
                                                 for layer, k in np.ndindex(L, T)})  # fmt: skip
    assert tables.summary["sink_rate"] == pytest.approx(rate[0, ..., 0].mean())
    assert tables.summary["sink_rates"] == pytest.approx({"0.3": rate[0, ..., 0].mean(), "0.2": rate[1, ..., 0].mean()})
    assert rate[0, ..., 0].mean() != rate[1, ..., 0].mean()


def test_window_summary_keeps_windows_below_its_cap_and_sums_each_window_over_layers_and_heads(monkeypatch):
    """Window ids 4094, 4095, 4096 against the cap of 4096 rows: the first two are kept. Per kept window, by loop over
    L = 2 layers × H = 3 heads: sink rate share of α > ε = 0.45, mean α, mean diagonal over t ≥ 1, and the share over
    layers and queries t ≥ 1 (two query blocks, 0–2 and 3–4) at which every head is hard sink or hard diagonal;
    the token hash Σ_t (id_t · 31^t mod P) mod P. Killed by `window_ids < MAX_WINDOWS` → `window_ids <= MAX_WINDOWS`
    (an IndexError past the state), by `.all(dim=-2)` → `.all(dim=-1)` (over queries instead of heads) and by
    `columns.diagonal[..., 1:]` → `columns.diagonal[..., :]` and by `alpha > self.epsilon` → `alpha >= self.epsilon`."""
    from sinkscope.statistics.statistic import Columns
    from sinkscope.statistics.window_summary import MAX_WINDOWS, WindowSummary

    assert MAX_WINDOWS == 4096
    Hs, epsilon, P = 3, 0.45, 2**31 - 1
    stat = WindowSummary(L, Hs, T, epsilon)
    ids = torch.randint(3, 90, (3, T), generator=torch.Generator().manual_seed(3))
    stat.begin_batch(ids, torch.tensor([4094, 4095, 4096]))
    generator = torch.Generator().manual_seed(4)
    columns, diagonals, hard = [], [], []
    for layer in range(L):
        columns.append(_columns(20 + layer, 3, Hs, T))
        columns[layer][layer, 1, 0] = 2.25  # α = 2.25 / 5 = 0.45 = ε in window 4094 + layer: not above it
        diagonals.append(torch.rand(3, Hs, T, generator=generator, dtype=torch.float64))
        stat.on_columns(layer, Columns(columns[layer], diagonals[layer]))
        sink = torch.rand(3, Hs, T, generator=generator) < 0.6
        diag = torch.rand(3, Hs, T, generator=generator) < 0.6
        sink[..., 0] = diag[..., 0] = False
        hard.append(sink | diag)
        for start, stop in ((0, 3), (3, T)):
            block = QueryBlock(start=start, sums={}, hard_sink=sink[..., start:stop], hard_diag=diag[..., start:stop],
                               out_norms=torch.zeros(3, Hs, stop - start))  # fmt: skip
            stat.on_query_block(layer, block)
    table = stat.compute(3).extra["windows"].set_index("window")
    assert table.index.tolist() == [4094, 4095]
    for w, window in enumerate((4094, 4095)):
        alphas = [float(columns[layer][w, h, 0]) / T for layer in range(L) for h in range(Hs)]
        diag_means = [sum(float(diagonals[layer][w, h, t]) for t in range(1, T)) / (T - 1)
                      for layer in range(L) for h in range(Hs)]  # fmt: skip
        mlp_like = sum(all(bool(hard[layer][w, h, t]) for h in range(Hs)) for layer in range(L) for t in range(1, T))
        row = table.loc[window]
        assert row["sink_rate"] == pytest.approx(sum(a > epsilon for a in alphas) / (L * Hs))
        assert row["mean_sink_score"] == pytest.approx(sum(alphas) / (L * Hs))
        assert row["mean_diag_score"] == pytest.approx(sum(diag_means) / (L * Hs))
        assert row["mlp_like_frac"] == pytest.approx(mlp_like / (L * (T - 1)))
        assert row["tokens_hash"] == sum(int(ids[w, t]) * pow(31, t, P) % P for t in range(T)) % P
    assert 0 < table["mlp_like_frac"].sum() and 0 < table["sink_rate"].sum() < 2
