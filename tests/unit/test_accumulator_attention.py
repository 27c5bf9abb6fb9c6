"""Accumulators merge like a single pass; blocked attention equals a plain softmax attention."""

import pytest
import torch

from sinkscope.capture.accumulator import Accumulator
from sinkscope.capture.attention import blocked_attention


def test_sums_and_maxima_and_their_all_reduce():
    import torch.distributed as dist

    a = Accumulator({"s": (2, 3), "m": (2,)}, maxima=frozenset({"m"}))
    a.add("s", (0,), torch.ones(3))
    a.add("s", (0,), 2 * torch.ones(3))
    a.add("m", (...,), torch.tensor([1.0, 5.0]))
    a.add("m", (...,), torch.tensor([3.0, 2.0]))
    assert a.tensors["s"][0].tolist() == [3, 3, 3] and a.tensors["s"][1].sum() == 0
    assert a.tensors["m"].tolist() == [3, 5] and a.tensors["s"].dtype == torch.float64
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29561", rank=0, world_size=1)
    try:
        a.all_reduce()  # one rank: unchanged
    finally:
        dist.destroy_process_group()
    assert a.tensors["m"].tolist() == [3, 5] and a.tensors["s"][0].tolist() == [3, 3, 3]


def reference(query, key, value, mask, scaling, softcap):
    group = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(group, 1)
    v = value.repeat_interleave(group, 1)
    logits = query @ k.transpose(-1, -2) * scaling
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits.masked_fill(~mask, -torch.inf)
    probs = logits.softmax(-1)
    return probs, (probs @ v).transpose(1, 2)


@pytest.mark.parametrize("kv, softcap, mask_kind", [(4, None, "none"), (2, None, "bool"), (1, 5.0, "float")])
def test_blocked_attention_matches_softmax(monkeypatch, kv, softcap, mask_kind):
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 2, 4, 11, 8
    q, k, v = (torch.randn(B, n, T, D, generator=g) for n in (H, kv, kv))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    window = causal & ~torch.ones(T, T, dtype=torch.bool).tril(-4)  # a sliding window of 4
    if mask_kind == "none":
        mask, allowed = None, causal
    elif mask_kind == "bool":
        mask, allowed = window.expand(B, 1, T, T), window
    else:
        mask = torch.zeros(B, 1, T, T).masked_fill(~window, torch.finfo(torch.float32).min)
        allowed = window
    probs_ref, out_ref = reference(q, k, v, allowed, 0.3, softcap)
    monkeypatch.setattr("sinkscope.capture.attention.BLOCK_ELEMENTS", B * H * T * 3)  # blocks of 3 queries
    seen = []

    def on_block(start, probs, entropy, out):
        seen.append(start)
        Q = probs.shape[2]
        torch.testing.assert_close(probs, probs_ref[:, :, start : start + Q, : probs.shape[-1]])
        p = probs_ref[:, :, start : start + Q]
        ent = -(torch.where(p > 0, p * p.log(), torch.zeros_like(p))).sum(-1)
        torch.testing.assert_close(entropy, ent, atol=1e-5, rtol=1e-5)

    out = blocked_attention(q, k, v, mask, 0.3, softcap, on_block)
    assert seen == [0, 3, 6, 9]
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)


def test_keyed_sums_grow_with_new_keys_and_merge_across_ranks():
    import torch.distributed as dist

    from sinkscope.capture.accumulator import KeyedAccumulator

    a = KeyedAccumulator({"n": (), "s": (2,)})
    a.add(torch.tensor([7, 3, 7]), {"n": torch.ones(3), "s": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])})
    a.add(torch.tensor([5, 3]), {"n": torch.ones(2), "s": torch.ones(2, 2)})
    assert a.keys.tolist() == [3, 5, 7]
    assert a.tensors["n"].tolist() == [2, 1, 2]
    assert a.tensors["s"].tolist() == [[4, 5], [1, 1], [6, 8]]
    b = KeyedAccumulator({"n": (), "s": (2,)})
    b.load_state(a.state("t"), "t")
    assert b.keys.tolist() == [3, 5, 7] and torch.equal(b.tensors["s"], a.tensors["s"])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29562", rank=0, world_size=1)
    try:
        a.all_reduce()  # one rank: unchanged
    finally:
        dist.destroy_process_group()
    assert a.keys.tolist() == [3, 5, 7] and a.tensors["s"].tolist() == [[4, 5], [1, 1], [6, 8]]


def _keyed_rank(rank: int, path: str) -> None:
    import torch.distributed as dist

    from sinkscope.capture.accumulator import KeyedAccumulator

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29563", rank=rank, world_size=2)
    try:
        table = KeyedAccumulator({"n": (), "s": (2,)})
        keys = torch.tensor([4, 9]) if rank == 0 else torch.tensor([9, 2, 2])
        table.add(keys, {"n": torch.ones(len(keys)), "s": torch.arange(2 * len(keys), dtype=torch.float64).view(-1, 2)})
        table.all_reduce()
        if rank == 0:
            torch.save(table.state("t"), path)
    finally:
        dist.destroy_process_group()


def test_keyed_sums_of_two_ranks_merge_by_key(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_keyed_rank, args=(str(tmp_path / "merged.pt"),), nprocs=2)
    state = torch.load(tmp_path / "merged.pt")
    # rank 0: 4 → [0, 1], 9 → [2, 3]; rank 1: 9 → [0, 1], 2 → [2, 3] + [4, 5]
    assert state["t.keys"].tolist() == [2, 4, 9]
    assert state["t.n"].tolist() == [2, 1, 2]
    assert state["t.s"].tolist() == [[6, 8], [0, 1], [2, 4]]
