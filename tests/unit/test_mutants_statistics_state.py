"""Survivors of the third sampled mutmut run over `statistics/` (docs/testing.md, "Mutation tool"): streaming
states merged and restored, a statistic's checkpoint names, and a ratio over a count of exactly one. Each checked
against a hand count or a direct computation written out here."""

from __future__ import annotations

import math

import torch

from sinkscope.statistics.certificates import HalfSpaceCertificates
from sinkscope.statistics.massive_activations import ArgMax, MassiveActivations
from sinkscope.statistics.output_gate import OutputGates
from sinkscope.statistics.state import KeyedSum, Max, PrioritySample, ShiftedMoments, Sum
from sinkscope.statistics.statistic import QueryBlock


def moments_of(batches: dict[int, torch.Tensor]) -> ShiftedMoments:
    """A state holding each layer's rows (N, 3), shifted by the rows' own first row."""
    state = ShiftedMoments(3)
    for layer, x in batches.items():
        centred = x - state.shift_of(layer, x[0])
        state.add(layer, len(x), centred.sum(0), [((slice(None), slice(None)), centred.T @ centred)])
    return state


def test_merging_moments_takes_every_layer_the_other_state_has_whether_new_here_or_not():
    """`a` holds layer 1; `b` holds layers 0, 1 and 2 (0 and 2 new to `a`). After the merge every layer's count,
    mean and second moment are those of all its rows, computed directly."""
    generator = torch.Generator().manual_seed(0)
    x = {layer: torch.randn(9, 3, generator=generator, dtype=torch.float64) + 5 * layer for layer in range(3)}
    a = moments_of({1: x[1][:4]})
    a.merge(moments_of({0: x[0], 1: x[1][4:], 2: x[2]}))
    assert sorted(a.n) == [0, 1, 2]
    for layer, rows in x.items():
        assert a.n[layer] == 9
        mean = a.shift[layer] + a.sum[layer] / a.n[layer]
        second = (
            a.outer[layer] / a.n[layer]
            + torch.outer(a.shift[layer], mean)
            + torch.outer(mean, a.shift[layer])
        )
        second -= torch.outer(a.shift[layer], a.shift[layer])
        torch.testing.assert_close(mean, rows.mean(0), rtol=0, atol=1e-12)
        torch.testing.assert_close(second, rows.T @ rows / 9, rtol=0, atol=1e-10)


def test_a_keyed_sum_restored_from_float32_tensors_keeps_float64_sums():
    """The sums are float64 whatever the restored tensors' type: 2^24 + 1 is exact after the restore (float32
    cannot hold it)."""
    state = KeyedSum({"n": ()})
    state.load({"keys": torch.tensor([3]), "n": torch.tensor([2.0**24], dtype=torch.float32)})
    state.add(torch.tensor([3]), {"n": torch.tensor([1.0])})
    assert state.values["n"].dtype == torch.float64 and state.values["n"].tolist() == [2.0**24 + 1]


def test_certificate_checkpoints_name_the_sample_and_the_sink_inputs():
    """A checkpoint's tensors are `"{state}.{tensor}"`: the sampled context inputs under `sample.`, BOS's input
    under `sink_inputs.` (what a resumed run reads back)."""
    certificates = HalfSpaceCertificates(cap=2)
    certificates.sample.offer(0, torch.tensor([0.3, 0.1]), torch.ones(2, 4))
    certificates.sink_inputs.offer(0, torch.ones(4))
    assert set(certificates.state_dict()) == {"sample.0.priorities", "sample.0.rows", "sink_inputs.0"}


def test_gate_ratios_over_a_single_off_query_or_a_single_sink_query_are_numbers():
    """One window, T = 4, queries t = 1..3. Head 0: gates 0.05, 0.5, 0.9 (off only at t = 1, τ_g = 0.1), hard sink
    only at t = 1 → one off query and one sink query: agreement = off_given_sink = 1/1. Head 1: every gate 0.8,
    sinks at t = 2, 3 → no off query (NaN agreement), off_given_sink = 0/2."""
    gates = OutputGates(n_layers=1, n_heads=2, seq_len=4)
    gates.on_gate(0, torch.tensor([[0.0, 0.05, 0.5, 0.9], [0.0, 0.8, 0.8, 0.8]]).reshape(1, 2, 4, 1))
    sink = torch.tensor([[False, True, False, False], [False, False, True, True]]).reshape(1, 2, 4)
    gates.on_query_block(
        0, QueryBlock(start=0, sums={}, hard_sink=sink, hard_diag=~sink, out_norms=torch.ones(1, 2, 4))
    )
    heads = gates.compute(windows=1).heads.set_index("head")
    assert heads.loc[0, "gate_off_frac"] == 1 / 3
    assert heads.loc[0, "gate_sink_agreement"] == 1.0 and heads.loc[0, "gate_off_given_sink"] == 1.0
    assert math.isnan(heads.loc[1, "gate_sink_agreement"]) and heads.loc[1, "gate_off_given_sink"] == 0.0
    assert math.isclose(heads.loc[0, "gate_mean"], (0.05 + 0.5 + 0.9) / 3, rel_tol=1e-6)  # float32 gates
    assert math.isclose(heads.loc[1, "gate_mean"], 0.8, rel_tol=1e-6)


def test_a_sum_adds_at_an_index_of_a_full_slice_then_plain_ints_where_plain_indexing_puts_it():
    """`Sum.add` takes any index: full slices then rows fold along that axis, any other mix (a slice, then an int,
    then an int) at once. Each add lands where `tensor[index] += value` puts it."""
    state, expected = Sum((2, 3, 4)), torch.zeros(2, 3, 4, dtype=torch.float64)
    adds = [((slice(None), 1, 2), torch.tensor([1.0, 2.0])), ((slice(None), slice(None), (0, 3)), torch.ones(2, 3, 2)),
            ((slice(None), 2), torch.full((2, 4), 5.0)), ((1, 0, 3), torch.tensor(7.0))]  # fmt: skip
    for index, value in adds:
        state.add(value, index)
        expected[index] += value.double()
    torch.testing.assert_close(state.value, expected, rtol=0, atol=0)


def test_a_max_on_another_device_merges_a_cpu_state_onto_its_own_device():
    """A state on an accelerator (the `meta` device stands in) merging one restored on the CPU: the merge moves
    the other's values to this state's device (mixing devices would raise)."""
    here, restored = Max((3,), device="meta"), Max((3,))
    restored.add(torch.tensor([1.0, 5.0, -2.0]))
    here.merge(restored)
    assert here.value.device.type == "meta" and here.value.shape == (3,)


def test_massive_activation_checkpoints_name_the_bos_and_rest_maxima_and_the_histogram():
    """A checkpoint's tensors are `"{state}.{tensor}"`: BOS's maxima, the other positions' maxima with where they
    occurred, and the magnitude histogram (what a resumed run reads back)."""
    names = set(MassiveActivations(n_layers=2, d_model=4).state_dict())
    assert names == {"bos.value", "rest.value", "rest.position", "histogram.value"}


def test_an_argmax_on_another_device_takes_cpu_values_onto_its_own_device():
    """A massive-activation maximum on an accelerator (`meta` stands in) given values from the CPU: they are moved
    to its device before the comparison (mixing devices would raise)."""
    state = ArgMax((3,), device="meta")
    state.add(torch.tensor([1.0, 5.0, -2.0]), torch.tensor([0, 1, 2]))
    assert state.value.device.type == "meta" and state.position.device.type == "meta"


def test_a_fresh_priority_sample_keeps_its_cap_when_a_rank_part_is_merged_in():
    """`all_reduce` merges each rank's part into `fresh()` states: a fresh sample of cap 2 offered five rows keeps
    the two of smallest priority (0.1 and 0.2, by hand), not all five (draw 41: `fresh` without the cap)."""
    part = PrioritySample(2).fresh()
    part.load({"0.priorities": torch.tensor([0.5, 0.1, 0.9, 0.2, 0.7]), "0.rows": torch.arange(5.0)[:, None]})
    merged = PrioritySample(2).fresh()
    merged.merge(part)
    priorities, rows = merged.layers[0]
    assert sorted(rows[:, 0].tolist()) == [1.0, 3.0] and torch.equal(priorities.sort().values, torch.tensor([0.1, 0.2]))
