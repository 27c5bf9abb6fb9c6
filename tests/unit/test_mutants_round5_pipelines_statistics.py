"""Output gates of heads that saw no query (or no gate closing, no sink): NaN ratios computed without a division by
zero, so no RuntimeWarning; the massive-activation ArgMax state's fresh copy, load and merge by hand (mutmut draw
54)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from sinkscope.statistics.massive_activations import ArgMax
from sinkscope.statistics.output_gate import OutputGates
from sinkscope.statistics.statistic import QueryBlock


def test_empty_heads_give_nan_without_a_warning():
    gates = OutputGates(n_layers=2, n_heads=3, seq_len=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a 0/0 anywhere would raise here
        heads = gates.compute(0).heads
    assert len(heads) == 6 and list(heads["layer"]) == [0, 0, 0, 1, 1, 1] and list(heads["head"]) == [0, 1, 2] * 2
    for column in ("gate_mean", "gate_off_frac", "gate_sink_agreement", "gate_off_given_sink"):
        assert all(math.isnan(v) for v in heads[column]), column


def test_argmax_state_fresh_load_and_merge_by_hand():
    state = ArgMax((2, 3))
    state.add(torch.tensor([[1.0, 5.0, -2.0], [0.5, 0.5, 7.0]]), torch.tensor([[4, 1, 2], [3, 3, 0]]))
    empty = state.fresh()
    assert type(empty) is ArgMax and empty.shape == (2, 3)
    assert torch.equal(empty.value, torch.full((2, 3), -torch.inf, dtype=torch.float64))
    assert torch.equal(empty.position, torch.full((2, 3), -1))
    empty.load({"value": state.value.float(), "position": state.position.int()})  # saved in other dtypes
    assert empty.position.dtype == torch.long and empty.value.dtype == torch.float64 and empty.value.tolist() == [[1.0, 5.0, -2.0], [0.5, 0.5, 7.0]]
    assert empty.position.tolist() == [[4, 1, 2], [3, 3, 0]]
    other = ArgMax((2, 3))
    other.add(torch.tensor([[1.0, 6.0, -3.0], [0.25, 0.5, 8.0]]), torch.tensor([[9, 9, 9], [9, 9, 9]]))
    empty.merge(other)  # the larger value wins; a tie keeps this state's position
    assert empty.value.tolist() == [[1.0, 6.0, -2.0], [0.5, 0.5, 8.0]]
    assert empty.position.tolist() == [[4, 9, 2], [3, 3, 9]]


def test_gate_sums_land_in_their_own_layer():
    gates = OutputGates(n_layers=2, n_heads=1, seq_len=3, tau=0.2)
    gates.on_gate(1, torch.tensor([[[[0.1, 0.2], [0.05, 0.05], [0.5, 0.7]]]]))  # (B, H, T, dh): g_t = 0.15, 0.05, 0.6
    sink = torch.tensor([[[False, True, True]]])
    rows = QueryBlock(start=0, sums={}, hard_sink=sink, hard_diag=torch.zeros_like(sink), out_norms=torch.zeros(1, 1, 3))
    gates.on_query_block(1, rows)
    heads = gates.compute(1).heads.set_index("layer")
    assert heads.loc[0, ["gate_mean", "gate_off_frac"]].isna().all()  # layer 0 saw nothing
    got = heads.loc[1]  # queries t = 1, 2: g = 0.05 (off, sink), 0.6 (on, sink)
    assert (got["gate_mean"], got["gate_off_frac"]) == (pytest.approx(0.325), 0.5)
    assert (got["gate_sink_agreement"], got["gate_off_given_sink"]) == (1.0, 0.5)
