"""Every kind of streaming state: folding two halves and merging equals one pass over all (checked against direct
computations on the whole data), `tensors()`/`load()` round-trips, and the distributed reduction of two gloo ranks
equals the merge."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sinkscope.errors import SinkscopeError
from sinkscope.statistics.state import FirstValue, KeyedSum, Max, PrioritySample, ShiftedMoments, Sum
from sinkscope.statistics.statistic import Statistic


def round_trip(state):
    copy = state.fresh()
    copy.load(state.tensors())
    return copy


def test_sum_and_max_merge_like_one_pass():
    data = torch.randn(10, 2, 3, dtype=torch.float64)
    halves = [Sum((2, 3)), Sum((2, 3))]
    maxima = [Max((2, 3)), Max((2, 3))]
    for i, x in enumerate(data):
        halves[i >= 4].add(x)
        maxima[i >= 4].add(x)
    halves[0].merge(round_trip(halves[1]))
    maxima[0].merge(round_trip(maxima[1]))
    torch.testing.assert_close(halves[0].value, data.sum(0))
    assert torch.equal(maxima[0].value, data.amax(0))
    with pytest.raises(SinkscopeError, match="expected"):
        Sum((2, 3)).load({"value": torch.zeros(3)})


def test_keyed_sums_grow_with_new_keys_and_merge_by_key():
    a, b = KeyedSum({"n": (), "s": (2,)}), KeyedSum({"n": (), "s": (2,)})
    a.add(torch.tensor([7, 3, 7]), {"n": torch.ones(3), "s": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])})
    b.add(torch.tensor([5, 3]), {"n": torch.ones(2), "s": torch.ones(2, 2)})
    a.merge(round_trip(b))
    assert a.keys.tolist() == [3, 5, 7]
    assert a.values["n"].tolist() == [2, 1, 2]
    assert a.values["s"].tolist() == [[4, 5], [1, 1], [6, 8]]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 40), split=st.floats(0, 1), cap=st.integers(1, 12), seed=st.integers(0, 1000))
def test_priority_sample_of_two_parts_is_the_sample_of_the_union(n, split, cap, seed):
    generator = torch.Generator().manual_seed(seed)
    priorities, rows = torch.rand(n, generator=generator), torch.randn(n, 3, generator=generator)
    cut = int(split * n)
    a, b = PrioritySample(cap), PrioritySample(cap)
    a.offer(0, priorities[:cut], rows[:cut])
    for i in range(cut, n):  # one row at a time
        b.offer(0, priorities[i : i + 1], rows[i : i + 1])
    a.merge(round_trip(b))
    expected = priorities.argsort()[:cap]
    got_priorities, got_rows = a.layers.get(0, (torch.empty(0), torch.empty(0, 3)))
    assert sorted(got_priorities.tolist()) == sorted(priorities[expected].tolist())
    assert torch.equal(got_rows[got_priorities.argsort()], rows[expected])


def test_first_value_keeps_the_first():
    a, b = FirstValue(), FirstValue()
    b.offer(1, torch.tensor([2.0]))
    a.offer(1, torch.tensor([1.0]))
    a.offer(1, torch.tensor([9.0]))
    a.merge(round_trip(b))
    b.merge(a)
    assert a.layers[1].item() == 1.0 and b.layers[1].item() == 2.0


def fold(moments: ShiftedMoments, layer: int, x: torch.Tensor, d: int) -> None:
    centred = x - moments.shift_of(layer, x.mean(0))
    blocks = [
        ((slice(None, d), slice(None, d)), centred[:, :d].T @ centred[:, :d]),
        ((slice(None, d), slice(d, None)), centred[:, :d].T @ centred[:, d:]),
        ((slice(d, None), slice(d, None)), centred[:, d:].T @ centred[:, d:]),
    ]
    moments.add(layer, len(x), centred.sum(0), blocks)


def test_shifted_moments_with_different_shifts_merge_into_the_pooled_covariance():
    generator = torch.Generator().manual_seed(0)
    d = 2
    x = torch.randn(50, 2 * d, generator=generator, dtype=torch.float64) * 3 + 100  # a large mean: shifts matter
    a, b = ShiftedMoments(2 * d, mirrored_at=d), ShiftedMoments(2 * d, mirrored_at=d)
    fold(a, 0, x[:20], d)
    fold(b, 0, x[20:35], d)  # its own shift, the mean of its first batch
    fold(b, 0, x[35:], d)
    a.merge(round_trip(b))
    assert a.n[0] == 50
    outer = a.outer[0].clone()
    outer[d:, :d] = outer[:d, d:].T
    mean_c = a.sum[0] / a.n[0]
    cov = outer / a.n[0] - torch.outer(mean_c, mean_c)
    np.testing.assert_allclose(cov.numpy(), np.cov(x.numpy().T, bias=True), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose((mean_c + a.shift[0]).numpy(), x.mean(0).numpy(), rtol=1e-12)
    assert torch.equal(a.outer[0][d:, :d], torch.zeros(d, d))  # the mirrored block stays unstored


class Counting(Statistic):
    name = "counting"

    def __init__(self):
        super().__init__()
        self.total = self.add_state("total", Sum((2,)))
        self.sample = self.add_state("sample", PrioritySample(3))


def test_a_statistic_round_trips_and_refuses_a_state_without_its_sums():
    a = Counting()
    a.total.add(torch.tensor([1.0, 2.0]))
    a.sample.offer(0, torch.tensor([0.5]), torch.ones(1, 2))
    b = Counting()
    b.load_state_dict(a.state_dict())
    assert b.total.value.tolist() == [1, 2] and b.sample.layers[0][0].tolist() == [0.5]
    with pytest.raises(SinkscopeError, match="lacks 'total'"):
        Counting().load_state_dict({})
    with pytest.raises(ValueError, match="unique"):
        a.add_state("total", Sum(()))


def _rank(rank: int, path: str) -> None:
    import torch.distributed as dist

    # a file store beside the result: no port, which another run of this test at the same time could hold
    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=2)
    try:
        generator = torch.Generator().manual_seed(rank)
        x = torch.randn(7 + rank, 4, generator=generator, dtype=torch.float64) + 10 * (rank + 1)
        total, maximum, keyed, moments = Sum((4,)), Max((4,)), KeyedSum({"n": ()}), ShiftedMoments(4)
        total.add(x.sum(0))
        maximum.add(x.amax(0))
        keyed.add(torch.tensor([4, 9]) if rank == 0 else torch.tensor([9, 2, 2]), {"n": torch.ones(2 + rank)})
        fold(moments, 3, x, 2)
        for state in (total, maximum, keyed, moments):
            state.all_reduce()
        if rank == 1:
            torch.save({"total": total.value, "max": maximum.value, "keys": keyed.keys, "n": keyed.values["n"],
                        "count": moments.n[3], "sum": moments.sum[3] + moments.n[3] * moments.shift[3]}, path)
    finally:
        dist.destroy_process_group()


def test_two_ranks_all_reduce_to_the_state_of_all_their_data(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(str(tmp_path / "merged.pt"),), nprocs=2)
    got = torch.load(tmp_path / "merged.pt")
    x = torch.cat([
        torch.randn(7 + r, 4, generator=torch.Generator().manual_seed(r), dtype=torch.float64) + 10 * (r + 1)
        for r in (0, 1)
    ])  # fmt: skip
    torch.testing.assert_close(got["total"], x.sum(0))
    assert torch.equal(got["max"], x.amax(0))
    assert got["keys"].tolist() == [2, 4, 9] and got["n"].tolist() == [2, 1, 2]
    assert got["count"] == 15
    torch.testing.assert_close(got["sum"], x.sum(0))
